"""Where SageMaker puts things under the job root (``/opt/ml``), for every reader and writer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/opt/ml")
# The same variable sagemaker_training reads, so the toolkit and we agree on the root.
ROOT_ENV = "SAGEMAKER_BASE_DIR"


def root_from_environ(environ: Mapping[str, str]) -> Path:
    value = environ.get(ROOT_ENV)
    return Path(value) if value else DEFAULT_ROOT


@dataclass(frozen=True)
class Paths:
    root: Path

    @property
    def config_dir(self) -> Path:
        return self.root / "input" / "config"

    @property
    def resource_config(self) -> Path:
        return self.config_dir / "resourceconfig.json"

    @property
    def hyperparameters(self) -> Path:
        return self.config_dir / "hyperparameters.json"

    @property
    def input_data_config(self) -> Path:
        return self.config_dir / "inputdataconfig.json"

    @property
    def tensorboard_config(self) -> Path:
        return self.config_dir / "tensorboardoutputconfig.json"

    @property
    def checkpoint_config(self) -> Path:
        return self.config_dir / "checkpointconfig.json"

    @property
    def data_dir(self) -> Path:
        return self.root / "input" / "data"

    def channel_dir(self, name: str) -> Path:
        return self.data_dir / name

    @property
    def code_dir(self) -> Path:
        return self.root / "code"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def checkpoint_dir(self) -> Path:
        """What SageMaker syncs with checkpoint_s3_uri unless checkpointconfig.json names another folder
        (config/checkpoints.py)."""
        return self.root / "checkpoints"

    @property
    def output_dir(self) -> Path:
        return self.root / "output"

    @property
    def output_data_dir(self) -> Path:
        return self.output_dir / "data"

    @property
    def tensorboard_dir(self) -> Path:
        """What SageMaker uploads to the TensorBoard output config's S3 path (its default local path)."""
        return self.output_dir / "tensorboard"

    @property
    def success_file(self) -> Path:
        return self.output_dir / "success"

    @property
    def failure_file(self) -> Path:
        return self.output_dir / "failure"
