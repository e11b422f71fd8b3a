"""What the SageMaker SDK v3's ``ModelTrainer`` with ``SourceCode`` puts in the job: its channels (``code``
for the source folder, ``sm_drivers`` for its drivers and ``sourcecode.json``), and the program that file
names, which stands for ``sagemaker_program`` when the hyperparameters name none.

The SDK's names are in ``config/sdk_names.py``. The drivers themselves are met by ``sagetrain/sdk/``; this
module only reads the files, as the rest of ``config/`` does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sagetrain.config.files import read_json_object
from sagetrain.config.paths import Paths
from sagetrain.config.sdk_names import CODE_CHANNEL, DRIVERS_CHANNEL, SOURCE_CODE_FILE

if TYPE_CHECKING:
    from sagetrain.config.hyperparameters import JobSettings


@dataclass(frozen=True)
class SourceCode:
    """The fields of the SDK's ``sourcecode.json`` this image uses."""

    entry_script: str | None
    has_source_dir: bool
    command: str | None


def read_source_code(paths: Paths) -> SourceCode | None:
    """The SDK's ``sourcecode.json``, or None when the job has none (no ``SourceCode``)."""
    path = paths.channel_dir(DRIVERS_CHANNEL) / SOURCE_CODE_FILE
    if not path.is_file():
        return None
    raw = read_json_object(path)
    entry_script, command = raw.get("entry_script"), raw.get("command")
    return SourceCode(
        entry_script=entry_script if isinstance(entry_script, str) and entry_script else None,
        has_source_dir=bool(raw.get("source_dir")),
        command=command if isinstance(command, str) and command else None,
    )


def with_source_code(settings: JobSettings, paths: Paths) -> JobSettings:
    """``settings`` with the SDK's entry script as ``sagemaker_program`` (and its code channel as
    ``sagemaker_submit_directory``) when the hyperparameters name no program; hyperparameters win."""
    if settings.program is not None:
        return settings
    source = read_source_code(paths)
    if source is None or source.entry_script is None:
        return settings
    submit = settings.submit_directory
    if submit is None and source.has_source_dir:
        submit = str(paths.channel_dir(CODE_CHANNEL))
    return dataclasses.replace(settings, program=source.entry_script, submit_directory=submit)
