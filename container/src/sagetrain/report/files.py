"""/opt/ml/output/success and /opt/ml/output/failure: written once, never deleting the user's files."""

from __future__ import annotations

import os
from pathlib import Path

from sagetrain.config.paths import Paths
from sagetrain.report.verdict import Verdict


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def failure_text(verdict: Verdict) -> str:
    """First line: the cause in plain words; then the details (traceback, last output lines)."""
    cause = " ".join(verdict.cause.split()) or f"the job failed with exit code {verdict.exit_code}"
    return cause + "\n" + (verdict.detail.rstrip() + "\n" if verdict.detail.strip() else "")


def write_report(paths: Paths, verdict: Verdict) -> Path:
    if verdict.succeeded:
        _write_atomically(paths.success_file, "")
        return paths.success_file
    _write_atomically(paths.failure_file, failure_text(verdict))
    return paths.failure_file
