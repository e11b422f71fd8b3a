"""/opt/ml/output/success and /opt/ml/output/failure: written once, never losing what the user wrote.

Which of them we wrote, and what, is kept next to them (``.sagetrain-report``: the file's name and a
hash of its text): a failure file that is ours is never taken for the program's own, and a restart on the
same tree removes our last run's report before the job starts (a file the program wrote stays).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from sagetrain.atomic_file import write_atomically
from sagetrain.config.paths import Paths
from sagetrain.report.verdict import Verdict

log = logging.getLogger(__name__)

# Between our report and a failure file the program had already written (AWS's toolkit keeps that one).
PROGRAM_TEXT_SEPARATOR = "--- the program's own failure file, as it wrote it: ---"
DETAIL_SEPARATOR = "--- details: ---"
MARKER_FILE = ".sagetrain-report"


def _read_if_present(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def _our_report(paths: Paths) -> Path | None:
    """The success or failure file, if it holds what we wrote there last; else None."""
    try:
        marker = json.loads((paths.output_dir / MARKER_FILE).read_text(encoding="utf-8"))
        path = paths.output_dir / str(marker["file"])
        ours = path in (paths.success_file, paths.failure_file) and marker["sha256"] == _digest(
            path.read_text(encoding="utf-8", errors="replace")
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return path if ours else None


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


def remove_previous_report(paths: Paths) -> None:
    """Before the job starts: remove the success or failure file our last run on this tree wrote, if it
    is still as we wrote it. Best effort: a file that cannot be removed is logged."""
    ours = _our_report(paths)
    try:
        if ours is not None:
            ours.unlink()
            log.info("removed %s, the report of an earlier run", ours)
        (paths.output_dir / MARKER_FILE).unlink(missing_ok=True)
    except OSError as error:
        log.warning("cannot remove the report of an earlier run under %s: %s", paths.output_dir, error)


def write_report(paths: Paths, verdict: Verdict) -> Path:
    """The success file, or the failure file with our cause first. A failure file the program wrote
    stays: on success it is left as it is, on failure its text follows our cause."""
    if verdict.succeeded:
        path, text = paths.success_file, ""
    else:
        ours = _our_report(paths) == paths.failure_file
        program_text = None if ours else _read_if_present(paths.failure_file)
        path, text = paths.failure_file, failure_text(verdict, program_text)
    # The marker first: a report without it would later pass for the program's own failure file.
    marker = {"file": path.name, "sha256": _digest(text)}
    write_atomically(paths.output_dir / MARKER_FILE, json.dumps(marker))
    write_atomically(path, text)
    return path
