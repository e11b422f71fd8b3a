"""SageMaker's TensorBoard output configuration, ``tensorboardoutputconfig.json``: present when the
training job has a ``TensorBoardOutputConfig``; its ``LocalPath`` is the folder SageMaker uploads to that
config's S3 path while the job runs (``/opt/ml/output/tensorboard`` unless the job names another)."""

from __future__ import annotations

import posixpath
from pathlib import Path, PurePosixPath
from typing import Any

from sagetrain.config.files import read_json_object
from sagetrain.config.paths import DEFAULT_ROOT, Paths
from sagetrain.errors import UserError

LOCAL_PATH_FIELD = "LocalPath"


def read_tensorboard_dir(paths: Paths) -> Path | None:
    """The job's TensorBoard output folder, or None when the job has no TensorBoard output config. A
    folder under /opt/ml is taken under ``paths.root`` (the same tree when the root is /opt/ml)."""
    if not paths.tensorboard_config.is_file():
        return None
    raw = read_json_object(paths.tensorboard_config)
    return parse_local_path(raw, paths)


def parse_local_path(raw: dict[str, Any], paths: Paths) -> Path:
    """``LocalPath`` of the config's JSON object, checked; SageMaker's default when absent. Pure."""
    value = raw.get(LOCAL_PATH_FIELD)
    if value is None:
        return paths.tensorboard_dir
    if not isinstance(value, str) or not PurePosixPath(value).is_absolute():
        raise UserError(
            f"{paths.tensorboard_config} field {LOCAL_PATH_FIELD!r} is {value!r}; it must be an absolute "
            "folder path such as /opt/ml/output/tensorboard (the TensorBoard output config's local path)"
        )
    folder = PurePosixPath(posixpath.normpath(value))
    if folder.is_relative_to(DEFAULT_ROOT):
        return paths.root / folder.relative_to(DEFAULT_ROOT)
    return Path(folder)


def tensorboard_config(local_path: str) -> dict[str, str]:
    """The file's content for a job whose TensorBoard output goes to ``local_path`` (for tree writers)."""
    return {LOCAL_PATH_FIELD: local_path}
