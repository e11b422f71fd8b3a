"""Where things live under the job root."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/opt/ml")
# The same variable sagemaker_training reads, so the toolkit and we agree on the root.
ROOT_ENV = "SAGEMAKER_BASE_DIR"


# The job's own scratch space on this host (rank registry, error files, host facts, ssh files), outside
# /opt/ml: nothing there is the user's. Overridable for tests.
DEFAULT_RUN_DIR = Path("/run/sagetrain")
RUN_DIR_ENV = "SAGETRAIN_RUN_DIR"


def root_from_environ(environ: Mapping[str, str]) -> Path:
    value = environ.get(ROOT_ENV)
    return Path(value) if value else DEFAULT_ROOT


def run_dir_from_environ(environ: Mapping[str, str]) -> Path:
    value = environ.get(RUN_DIR_ENV)
    return Path(value) if value else DEFAULT_RUN_DIR


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
    def data_dir(self) -> Path:
        return self.root / "input" / "data"

    @property
    def code_dir(self) -> Path:
        return self.root / "code"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def output_dir(self) -> Path:
        return self.root / "output"

    @property
    def success_file(self) -> Path:
        return self.output_dir / "success"

    @property
    def failure_file(self) -> Path:
        return self.output_dir / "failure"
