"""SageMaker's checkpoint configuration, ``checkpointconfig.json``: present when the training job has a
``CheckpointConfig`` (the SDKs' ``checkpoint_s3_uri``); its ``LocalPath`` is the folder SageMaker syncs
with that S3 prefix while the job runs and restores into when a job restarts
(``/opt/ml/checkpoints`` unless the job names another, the SDKs' ``checkpoint_local_path``)."""

from __future__ import annotations

from pathlib import Path

from sagetrain.config.local_paths import read_local_path
from sagetrain.config.paths import Paths


def read_checkpoint_dir(paths: Paths) -> Path:
    """The job's checkpoint folder: the checkpoint configuration's, else SageMaker's default."""
    return read_local_path(paths.checkpoint_config, paths.checkpoint_dir, paths) or paths.checkpoint_dir
