"""A failing rank's one-sentence cause: on stderr, and in the error file its rank launcher reads."""

from __future__ import annotations

import traceback
from pathlib import Path

from sagetrain.contracts import write_error_file
from sagetrain.trainer.notes import print_note


def report_failure(message: str, error_file: Path | None, error: BaseException | None = None) -> None:
    """Write ``message`` to stderr (whatever the job's log level: it is why the job failed) and, when the
    rank launcher gave one, to the error file."""
    print_note(message)
    if error_file is not None:
        trace = "".join(traceback.format_exception(error)) if error is not None else ""
        write_error_file(error_file, message, trace)
