"""The per-rank error file of docs/contracts.md: one JSON object with a one-sentence message."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from sagetrain.atomic_file import write_atomically


def report_failure(message: str, error_file: Path | None, error: BaseException | None = None) -> None:
    """Write ``message`` to stderr and, when the rank launcher gave one, to the error file (atomically)."""
    print(f"sagetrain.trainer: {message}", file=sys.stderr, flush=True)
    if error_file is None:
        return
    trace = "".join(traceback.format_exception(error)) if error is not None else ""
    write_atomically(error_file, json.dumps({"message": message, "traceback": trace}))
