"""The job as one rank of the managed trainer sees it: the same configuration the launcher read
(config/), its place in the job and the engine (contracts, as the launcher set them), and where its
files go. Reads this host's /opt/ml tree and the mapping it is handed (``os.environ`` at the edge,
literals in tests)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sagetrain import contracts
from sagetrain.config.channels import Channel
from sagetrain.config.checkpoints import read_checkpoint_dir
from sagetrain.config.job import JobConfig, load_job_config
from sagetrain.config.paths import Paths, root_from_environ
from sagetrain.config.tensorboard import read_tensorboard_dir
from sagetrain.config.toolkit_env import CURRENT_HOST_VAR
from sagetrain.contracts import RankPlace
from sagetrain.engines import Engine
from sagetrain.errors import PlatformError
from sagetrain.trainer.hyperparameters import HyperParameters
from sagetrain.trainer.notes import Notes, job_log_level


@dataclass(frozen=True)
class TrainerJob:
    config: JobConfig
    engine: Engine
    ranks: RankPlace
    hyperparameters: HyperParameters  # what the model module's functions get as ``hp``
    checkpoint_dir: Path
    error_file: Path | None
    report_dir: Path | None  # per-rank diagnostics, when asked for
    current_host: str | None  # this rank's host, as the launcher told it; None when run without one
    notes: Notes  # the trainer's notes at the job's log level
    # Where this host's ranks share each channel's listing and deal (the launcher's run directory); None
    # when no other rank of the job runs on this host, or no launcher started this one.
    listings_dir: Path | None = None

    @property
    def paths(self) -> Paths:
        return self.config.paths

    @property
    def tensorboard_dir(self) -> Path | None:
        """Where rank 0 writes the epoch scalars: the job's TensorBoard output config's folder (read here,
        where it is used: a script job never fails on that file), else SageMaker's default one when it
        exists; None: nowhere."""
        configured = read_tensorboard_dir(self.paths)
        if configured is not None:
            return configured
        default = self.paths.tensorboard_dir
        return default if default.is_dir() else None

    def channel(self, name: str) -> Channel | None:
        return self.config.channel(name)


def _engine(environ: Mapping[str, str]) -> Engine:
    value = environ.get(contracts.ENGINE_VAR, Engine.SINGLE.value)
    try:
        return Engine(value)
    except ValueError:
        raise PlatformError(
            f"{contracts.ENGINE_VAR}={value!r} is not one of {[engine.value for engine in Engine]}"
        ) from None


def _optional_path(environ: Mapping[str, str], name: str) -> Path | None:
    value = environ.get(name)
    return Path(value) if value else None


def _listings_dir(environ: Mapping[str, str], ranks: RankPlace) -> Path | None:
    if ranks.local_size < 2 or not environ.get(contracts.RUN_DIR_VAR):
        return None
    return contracts.RunDir.from_env(environ).listings


def trainer_job(environ: Mapping[str, str]) -> TrainerJob:
    config = load_job_config(root_from_environ(environ), check_channels=False)
    ranks = RankPlace.from_env(environ)
    return TrainerJob(
        config=config,
        engine=_engine(environ),
        ranks=ranks,
        hyperparameters=HyperParameters(config.user_hyperparameters),
        checkpoint_dir=read_checkpoint_dir(config.paths),
        error_file=_optional_path(environ, contracts.ERROR_FILE_VAR),
        report_dir=_optional_path(environ, contracts.TRAINER_REPORT_DIR_VAR),
        current_host=environ.get(CURRENT_HOST_VAR) or None,
        notes=Notes(job_log_level(environ)),
        listings_dir=_listings_dir(environ, ranks),
    )
