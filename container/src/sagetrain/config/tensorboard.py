"""SageMaker's TensorBoard output configuration, ``tensorboardoutputconfig.json``: present when the
training job has a ``TensorBoardOutputConfig``; its ``LocalPath`` is the folder SageMaker uploads to that
config's S3 path while the job runs (``/opt/ml/output/tensorboard`` unless the job names another)."""

from __future__ import annotations

from pathlib import Path

from sagetrain.config.local_paths import read_local_path
from sagetrain.config.paths import Paths


def read_tensorboard_dir(paths: Paths) -> Path | None:
    """The job's TensorBoard output folder, or None when the job has no TensorBoard output config."""
    return read_local_path(paths.tensorboard_config, paths.tensorboard_dir, paths)
