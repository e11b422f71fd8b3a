"""The benchmarks' own interpreter: what benchmarks/requirements.txt pins (the plots), made on first use,
with the repository's packages (the one Docker client, sagetrain's Deadline) importable. Standard library
only: a command imports this before it has been started again under that interpreter."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH_VENV = Path(os.environ.get("SAGETRAIN_BENCH_VENV", REPO / "benchmarks" / ".venv"))
REQUIREMENTS = REPO / "benchmarks" / "requirements.txt"


def bench_python() -> Path:
    """The benchmarks' interpreter, its packages as pinned (installed again when the pins change)."""
    python = BENCH_VENV / "bin" / "python"
    stamp = BENCH_VENV / "requirements.txt"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    if not stamp.exists() or stamp.read_text() != REQUIREMENTS.read_text():
        print(f"benchmarks: installing {REQUIREMENTS.relative_to(REPO)} into {BENCH_VENV}", flush=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
        stamp.write_text(REQUIREMENTS.read_text())
    return python


def run_in_bench_env(script: str) -> None:
    """Started as `python3 <script>`: starts it again under the benchmarks' interpreter, with the
    repository's packages through the same launcher as scripts/local-cluster's; returns when already
    there. benchlib and figures are found beside benchmarks/run.py (the caller puts that folder first
    on sys.path)."""
    if importlib.util.find_spec("localcluster") is not None and Path(sys.prefix) == BENCH_VENV.resolve():
        return
    os.environ["PYTHON"] = str(bench_python())
    os.execv(REPO / "scripts" / "repo-python", ["repo-python", "-B", script, *sys.argv[1:]])
