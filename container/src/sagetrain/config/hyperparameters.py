"""hyperparameters.json: decoded values, the SDK's ``sagemaker_*`` settings, our ``sagetrain_*`` settings.

Every value SageMaker writes is a JSON-encoded string (``"10"``, ``"\\"train.py\\""``, ``"true"``).
Decoding follows sagemaker_training (a value that is not JSON stays the raw string), so user scripts see
the same values as under AWS's images.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagetrain.config.mpi_options import PLAN_OWNED, options
from sagetrain.errors import UserError

SAGEMAKER_PREFIX = "sagemaker_"
SAGETRAIN_PREFIX = "sagetrain_"
# Keys the toolkit keeps out of the user's hyperparameters although they lack the sagemaker_ prefix.
TOOLKIT_RESERVED_KEYS = frozenset({"_tuning_objective_metric", "default_user_module_name"})

SAGETRAIN_DEFAULTS: dict[str, int | float] = {
    "sagetrain_coordinator_port": 7077,
    "sagetrain_ssh_port": 22,
    "sagetrain_worker_wait_seconds": 600.0,
    "sagetrain_launch_wait_seconds": 300.0,
    "sagetrain_tf_config_port": 2222,
    "sagetrain_ps_port": 2223,
}


def decode_hyperparameters(raw: Mapping[str, Any]) -> dict[str, Any]:
    decoded: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # not JSON: the toolkit keeps the raw string too
                value = json.loads(value)
        decoded[key] = value
    return decoded


def is_user_key(key: str) -> bool:
    return not (
        key.startswith(SAGEMAKER_PREFIX) or key.startswith(SAGETRAIN_PREFIX) or key in TOOLKIT_RESERVED_KEYS
    )


def user_hyperparameters(decoded: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in decoded.items() if is_user_key(k)}


@dataclass(frozen=True)
class JobSettings:
    """The engine and launch settings a job's hyperparameters carry (SDK names plus our own)."""

    program: str | None = None
    submit_directory: str | None = None
    job_name: str | None = None
    mpi_enabled: bool = False
    mpi_processes_per_host: int | None = None
    mpi_num_processes: int | None = None
    custom_mpi_options: tuple[str, ...] = ()  # split as a shell would, so mpirun gets them as written
    multi_worker_mirrored_enabled: bool = False
    parameter_server_enabled: bool = False
    smddp_enabled: bool = False
    network_interface_name: str | None = None
    distribution_instance_groups: tuple[str, ...] | None = None
    coordinator_port: int = 7077
    ssh_port: int = 22
    worker_wait_seconds: float = 600.0
    launch_wait_seconds: float = 300.0  # mpirun: from its start until every rank has started
    tf_config_port: int = 2222
    ps_port: int = 2223


class _Reader:
    def __init__(self, decoded: Mapping[str, Any], source: Path) -> None:
        self.decoded = decoded
        self.source = source

    def _bad(self, key: str, expected: str) -> UserError:
        return UserError(f"{self.source} field {key} must be {expected}, got {self.decoded[key]!r}")

    def boolean(self, key: str) -> bool:
        value = self.decoded.get(key, False)
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self._bad(key, "true or false")

    def integer(self, key: str, *, minimum: int = 0) -> int | None:
        if key not in self.decoded or self.decoded[key] is None:
            return None
        value = self.decoded[key]
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._bad(key, f"an integer >= {minimum}")
        return value

    def number(self, key: str) -> float | None:
        if key not in self.decoded:
            return None
        value = self.decoded[key]
        # JSON's Infinity and NaN decode to floats; a wait of either is no bound at all.
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise self._bad(key, "a positive, finite number")
        return float(value)

    def text(self, key: str) -> str | None:
        value = self.decoded.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def arguments(self, key: str) -> tuple[str, ...]:
        """A command-line fragment split as a shell splits it (quotes group, backslashes escape)."""
        value = self.text(key)
        if not value:
            return ()
        try:
            return tuple(shlex.split(value))
        except ValueError as error:  # shlex: "No closing quotation", "No escaped character"
            raise UserError(
                f"{self.source} field {key} cannot be split into mpirun arguments ({error}): {value!r}; "
                "close the quote or escape it with a backslash"
            ) from None

    def mpi_options(self, key: str) -> tuple[str, ...]:
        """mpirun options, without those that set how many ranks run where: the plan owns them."""
        tokens = self.arguments(key)
        owned = [flag for option, flag in options(tokens) if option in PLAN_OWNED]
        if owned:
            raise UserError(
                f"{self.source} field {key} sets {owned[0]} ({self.decoded[key]!r}), but the launcher "
                "decides how many ranks run on which hosts; remove it and set "
                "sagemaker_mpi_num_of_processes_per_host (ranks per host) or sagemaker_mpi_num_processes "
                "(fewer ranks in all) instead"
            )
        return tokens

    def string_list(self, key: str) -> tuple[str, ...] | None:
        value = self.decoded.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(key, "a list of instance group names")
        return tuple(value)


def parse_settings(decoded: Mapping[str, Any], source: Path) -> JobSettings:
    unknown = sorted(k for k in decoded if k.startswith(SAGETRAIN_PREFIX) and k not in SAGETRAIN_DEFAULTS)
    if unknown:
        raise UserError(
            f"{source} has unknown setting {unknown[0]}; known: {', '.join(sorted(SAGETRAIN_DEFAULTS))}"
        )
    read = _Reader(decoded, source)

    def port(key: str) -> int:
        value = read.integer(key, minimum=1)
        if value is not None and value > 65535:
            raise read._bad(key, "a TCP port (1-65535)")
        return int(SAGETRAIN_DEFAULTS[key]) if value is None else value

    def seconds(key: str) -> float:
        value = read.number(key)
        return float(SAGETRAIN_DEFAULTS[key]) if value is None else value

    groups = read.string_list("sagemaker_distribution_instance_groups")
    if groups is None:
        groups = read.string_list("sagemaker_instance_groups")
    return JobSettings(
        program=read.text("sagemaker_program"),
        submit_directory=read.text("sagemaker_submit_directory"),
        job_name=read.text("sagemaker_job_name"),
        mpi_enabled=read.boolean("sagemaker_mpi_enabled"),
        mpi_processes_per_host=read.integer("sagemaker_mpi_num_of_processes_per_host", minimum=1),
        mpi_num_processes=read.integer("sagemaker_mpi_num_processes", minimum=1),
        custom_mpi_options=read.mpi_options("sagemaker_mpi_custom_mpi_options"),
        multi_worker_mirrored_enabled=read.boolean("sagemaker_multi_worker_mirrored_strategy_enabled"),
        parameter_server_enabled=read.boolean("sagemaker_parameter_server_enabled"),
        smddp_enabled=read.boolean("sagemaker_distributed_dataparallel_enabled"),
        network_interface_name=read.text("sagemaker_network_interface_name") or None,
        distribution_instance_groups=groups,
        coordinator_port=port("sagetrain_coordinator_port"),
        ssh_port=port("sagetrain_ssh_port"),
        worker_wait_seconds=seconds("sagetrain_worker_wait_seconds"),
        launch_wait_seconds=seconds("sagetrain_launch_wait_seconds"),
        tf_config_port=port("sagetrain_tf_config_port"),
        ps_port=port("sagetrain_ps_port"),
    )
