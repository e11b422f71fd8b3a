"""The ``LocalPath`` of SageMaker's output configurations (``tensorboardoutputconfig.json``,
``checkpointconfig.json``): the folder on the host that SageMaker syncs with the configuration's S3
location while the job runs. One reader for both, with one message."""

from __future__ import annotations

import posixpath
from pathlib import Path, PurePosixPath
from typing import Any

from sagetrain.config.files import read_json_object
from sagetrain.config.paths import DEFAULT_ROOT, Paths
from sagetrain.errors import UserError

LOCAL_PATH_FIELD = "LocalPath"


def read_local_path(config_file: Path, default: Path, paths: Paths) -> Path | None:
    """The folder ``config_file`` names, or None when the job has no such configuration (the file is
    absent); ``default`` when the file names none."""
    if not config_file.is_file():
        return None
    return parse_local_path(read_json_object(config_file), config_file, default, paths)


def parse_local_path(raw: dict[str, Any], config_file: Path, default: Path, paths: Paths) -> Path:
    """``LocalPath`` of the configuration's JSON object, checked; ``default`` when absent. A folder under
    /opt/ml is taken under ``paths.root`` (the same tree when the root is /opt/ml). Pure."""
    value = raw.get(LOCAL_PATH_FIELD)
    if value is None:
        return default
    if not isinstance(value, str) or not PurePosixPath(value).is_absolute():
        raise UserError(
            f"{config_file} field {LOCAL_PATH_FIELD!r} is {value!r}; it must be an absolute folder path "
            f"such as {DEFAULT_ROOT / default.relative_to(paths.root)} (the configuration's local path)"
        )
    folder = PurePosixPath(posixpath.normpath(value))
    if folder.is_relative_to(DEFAULT_ROOT):
        return paths.root / folder.relative_to(DEFAULT_ROOT)
    return Path(folder)


def local_path_config(local_path: str) -> dict[str, str]:
    """A configuration file's content for a job whose folder is ``local_path`` (for tree writers)."""
    return {LOCAL_PATH_FIELD: local_path}
