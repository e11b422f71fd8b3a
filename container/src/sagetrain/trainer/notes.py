"""The trainer's own notes on stderr (``sagetrain.trainer: …``), at the job's log level.

The job's level is ``sagemaker_container_log_level`` as config/ settled it, which every rank's
environment carries as the toolkit's ``SM_LOG_LEVEL``: informational notes (resuming, rank counts,
progress, checkpoints, export) show at INFO or lower, warnings at WARNING or lower. The epoch lines and
failure messages are not notes: they are the job's output and always printed.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from sagetrain.config.hyperparameters import LOG_LEVEL_EXPECTED, log_level
from sagetrain.config.toolkit_env import TOOLKIT_LOG_LEVEL_VAR
from sagetrain.errors import PlatformError

PREFIX = "sagetrain.trainer: "


def shown(note_level: int, job_level: int) -> bool:
    """Whether a note of ``note_level`` is printed in a job that logs at ``job_level`` (logging's rule:
    at or above it). Pure."""
    return note_level >= job_level


def job_log_level(environ: Mapping[str, str]) -> int:
    """The job's log level from the rank's environment; INFO when it has none."""
    value = environ.get(TOOLKIT_LOG_LEVEL_VAR)
    if not value:
        return logging.INFO
    level = log_level(value)
    if level is None:
        raise PlatformError(
            f"{TOOLKIT_LOG_LEVEL_VAR}={value!r} in the trainer's environment is not {LOG_LEVEL_EXPECTED}; "
            "the launcher sets it from sagemaker_container_log_level"
        )
    return level


def print_note(message: str) -> None:
    print(f"{PREFIX}{message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Notes:
    """Prints the notes the job's ``level`` lets through."""

    level: int = logging.INFO

    def shows(self, note_level: int) -> bool:
        return shown(note_level, self.level)

    def info(self, message: str) -> None:
        if self.shows(logging.INFO):
            print_note(message)

    def warning(self, message: str) -> None:
        if self.shows(logging.WARNING):
            print_note(message)
