"""The job environment the launcher gives every rank, parsed once into frozen values. Pure.

Reads only the mapping it is handed (``os.environ`` at the edge, literals in tests) and, when
``SM_HPS`` is absent, ``hyperparameters.json`` under the job root.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from sagetrain.config.paths import root_from_environ
from sagetrain.errors import UserError
from sagetrain.trainer.hyperparameters import HyperParameters


class EngineName(Enum):
    SINGLE = "single"
    HOROVOD = "horovod"
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"
    PARAMETER_SERVER = "parameter_server"


class InputMode(Enum):
    FILE = "File"
    FAST_FILE = "FastFile"
    PIPE = "Pipe"


class Distribution(Enum):
    FULLY_REPLICATED = "FullyReplicated"
    SHARDED_BY_S3_KEY = "ShardedByS3Key"


@dataclass(frozen=True)
class ChannelSpec:
    name: str
    directory: Path
    input_mode: InputMode
    distribution: Distribution
    content_type: str | None


@dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: int
    size: int
    local_size: int

    def __post_init__(self) -> None:
        if not (0 <= self.rank < self.size and 0 <= self.local_rank < self.local_size <= self.size):
            raise UserError(
                f"SAGETRAIN_RANK={self.rank}, SAGETRAIN_LOCAL_RANK={self.local_rank}, "
                f"SAGETRAIN_SIZE={self.size}, SAGETRAIN_LOCAL_SIZE={self.local_size} are inconsistent."
            )


@dataclass(frozen=True)
class JobEnvironment:
    root: Path
    engine: EngineName
    ranks: RankInfo
    hyperparameters: HyperParameters
    channels: tuple[ChannelSpec, ...]
    model_dir: Path
    output_data_dir: Path
    checkpoint_dir: Path
    tensorboard_dir: Path
    error_file: Path | None
    report_dir: Path | None

    def channel(self, name: str) -> ChannelSpec | None:
        return next((spec for spec in self.channels if spec.name == name), None)


def _int_variable(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise UserError(f"environment variable {name} must be an integer, got {value!r}.") from None


def _json_variable(environ: Mapping[str, str], name: str) -> object:
    try:
        return json.loads(environ[name])
    except ValueError as error:
        raise UserError(f"environment variable {name} is not valid JSON ({error}).") from None


def _hyperparameters(environ: Mapping[str, str], root: Path) -> HyperParameters:
    if "SM_HPS" in environ:
        decoded = _json_variable(environ, "SM_HPS")
        if not isinstance(decoded, dict):
            raise UserError("environment variable SM_HPS must hold a JSON object.")
        return HyperParameters.from_decoded(decoded)
    path = root / "input" / "config" / "hyperparameters.json"
    if not path.exists():
        return HyperParameters({})
    try:
        raw = json.loads(path.read_text())
    except ValueError as error:
        raise UserError(f"{path} is not valid JSON ({error}).") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path} must hold a JSON object of hyperparameters.")
    return HyperParameters.from_json_strings(raw)


def _channel_specs(environ: Mapping[str, str], root: Path) -> tuple[ChannelSpec, ...]:
    data_config: dict[str, object] = {}
    if "SM_INPUT_DATA_CONFIG" in environ:
        loaded = _json_variable(environ, "SM_INPUT_DATA_CONFIG")
        data_config = loaded if isinstance(loaded, dict) else {}
    if "SM_CHANNELS" in environ:
        names = _json_variable(environ, "SM_CHANNELS")
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise UserError("environment variable SM_CHANNELS must hold a JSON list of channel names.")
    else:
        names = list(data_config)
    specs = []
    for name in sorted(names):
        config = data_config.get(name, {})
        config = config if isinstance(config, dict) else {}
        directory = environ.get(f"SM_CHANNEL_{name.upper()}") or str(root / "input" / "data" / name)
        mode_value = config.get("TrainingInputMode", InputMode.FILE.value)
        distribution_value = config.get("S3DistributionType", Distribution.FULLY_REPLICATED.value)
        try:
            mode = InputMode(mode_value)
            distribution = Distribution(distribution_value)
        except ValueError:
            raise UserError(
                f"channel {name!r} in SM_INPUT_DATA_CONFIG has TrainingInputMode {mode_value!r} / "
                f"S3DistributionType {distribution_value!r}, which this trainer does not know."
            ) from None
        content_type = config.get("ContentType")
        specs.append(
            ChannelSpec(
                name,
                Path(directory),
                mode,
                distribution,
                content_type if isinstance(content_type, str) else None,
            )
        )
    return tuple(specs)


def job_environment(environ: Mapping[str, str]) -> JobEnvironment:
    root = root_from_environ(environ)
    engine_value = environ.get("SAGETRAIN_ENGINE", EngineName.SINGLE.value)
    try:
        engine = EngineName(engine_value)
    except ValueError:
        raise UserError(
            f"SAGETRAIN_ENGINE={engine_value!r} is not one of {[item.value for item in EngineName]}."
        ) from None
    size = _int_variable(environ, "SAGETRAIN_SIZE", 1)
    ranks = RankInfo(
        rank=_int_variable(environ, "SAGETRAIN_RANK", 0),
        local_rank=_int_variable(environ, "SAGETRAIN_LOCAL_RANK", 0),
        size=size,
        local_size=_int_variable(environ, "SAGETRAIN_LOCAL_SIZE", size),
    )
    error_file = environ.get("SAGETRAIN_ERROR_FILE")
    report_dir = environ.get("SAGETRAIN_TRAINER_REPORT_DIR")
    return JobEnvironment(
        root=root,
        engine=engine,
        ranks=ranks,
        hyperparameters=_hyperparameters(environ, root),
        channels=_channel_specs(environ, root),
        model_dir=Path(environ.get("SM_MODEL_DIR") or root / "model"),
        output_data_dir=Path(environ.get("SM_OUTPUT_DATA_DIR") or root / "output" / "data"),
        checkpoint_dir=Path(environ.get("SAGETRAIN_CHECKPOINT_DIR") or root / "checkpoints"),
        tensorboard_dir=root / "output" / "tensorboard",
        error_file=Path(error_file) if error_file else None,
        report_dir=Path(report_dir) if report_dir else None,
    )
