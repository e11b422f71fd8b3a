"""/opt/ml/output/success and /opt/ml/output/failure: written once, never losing what the user wrote."""

from __future__ import annotations

import os
from pathlib import Path

from sagetrain.config.paths import Paths
from sagetrain.report.verdict import Verdict

# Between our report and a failure file the program had already written (AWS's toolkit keeps that one).
PROGRAM_TEXT_SEPARATOR = "--- the program's own failure file, as it wrote it: ---"
DETAIL_SEPARATOR = "--- details: ---"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def _read_if_present(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


def failure_text(verdict: Verdict, program_text: str | None = None) -> str:
    """First line: the cause in plain words; then what the program wrote to the failure file itself, if
    anything, below a separator; then the details (traceback, last output lines). Pure."""
    cause = " ".join(verdict.cause.split()) or f"the job failed with exit code {verdict.exit_code}"
    detail = verdict.detail.rstrip()
    if program_text is None:
        return cause + "\n" + (detail + "\n" if detail else "")
    kept = program_text if program_text.endswith("\n") or not program_text else program_text + "\n"
    text = f"{cause}\n{PROGRAM_TEXT_SEPARATOR}\n{kept}"
    return text + (f"{DETAIL_SEPARATOR}\n{detail}\n" if detail else "")


def write_report(paths: Paths, verdict: Verdict) -> Path:
    """The success file, or the failure file with our cause first. A failure file the program wrote
    stays: on success it is left as it is, on failure its text follows our cause."""
    if verdict.succeeded:
        _write_atomically(paths.success_file, "")
        return paths.success_file
    _write_atomically(paths.failure_file, failure_text(verdict, _read_if_present(paths.failure_file)))
    return paths.failure_file
