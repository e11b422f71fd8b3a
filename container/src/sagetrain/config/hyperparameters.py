"""hyperparameters.json: the codec SageMaker uses, one reader of typed values with one set of messages,
the SDK's ``sagemaker_*`` settings and our ``sagetrain_*`` settings.

Every value SageMaker writes is a JSON-encoded string (``"10"``, ``"\\"train.py\\""``, ``"true"``).
Decoding follows sagemaker_training (a value that is not JSON stays the raw string), so user scripts see
the same values as under AWS's images. The launcher and the managed trainer read the same file through
the same functions here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import logging
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from sagetrain.config.files import check_texts, quoted
from sagetrain.config.limits import (
    MAX_HYPERPARAMETER_NAME,
    MAX_HYPERPARAMETER_VALUE,
    MAX_HYPERPARAMETERS,
    SAGEMAKER_MAX_HYPERPARAMETER_NAME,
    SAGEMAKER_MAX_HYPERPARAMETER_VALUE,
    SAGEMAKER_MAX_HYPERPARAMETERS,
)
from sagetrain.config.mpi_options import PLAN_OWNED, options
from sagetrain.engines import REGISTRY, Engine
from sagetrain.errors import UserError
from sagetrain.redact import MASK, looks_secret, masked_options_text, masked_value

SAGEMAKER_PREFIX = "sagemaker_"
SAGETRAIN_PREFIX = "sagetrain_"
# Keys the toolkit keeps out of the user's hyperparameters although they lack the sagemaker_ prefix.
TUNING_OBJECTIVE_KEY = "_tuning_objective_metric"
TOOLKIT_RESERVED_KEYS = frozenset({TUNING_OBJECTIVE_KEY, "default_user_module_name"})
SMDDP_KEY = "sagemaker_distributed_dataparallel_enabled"
CUSTOM_MPI_OPTIONS_KEY = "sagemaker_mpi_custom_mpi_options"
PROCESSES_PER_HOST_KEY = "sagemaker_mpi_num_of_processes_per_host"
NUM_PROCESSES_KEY = "sagemaker_mpi_num_processes"
DISTRIBUTION_GROUPS_KEY = "sagemaker_distribution_instance_groups"
PROGRAM_KEY = "sagemaker_program"
# A derived image may name its program in its environment instead (sagemaker-training reads it too); the
# hyperparameter wins when both are set.
PROGRAM_VAR = "SAGEMAKER_PROGRAM"
# The SDKs' container_log_level: how much the image's own toolkit logs (a logging level, 20 = INFO).
LOG_LEVEL_KEY = "sagemaker_container_log_level"
LOG_LEVEL_VAR = "SAGEMAKER_CONTAINER_LOG_LEVEL"

E = TypeVar("E", bound=Enum)


def encode_hyperparameters(values: Mapping[str, object]) -> dict[str, str]:
    """As SageMaker writes hyperparameters.json: every value a JSON-encoded string."""
    return {key: json.dumps(value) for key, value in values.items()}


def decode_value(value: object) -> object:
    """One value as sagemaker_training decodes it: JSON when it parses, else the string itself."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


def decode_hyperparameters(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {key: decode_value(value) for key, value in raw.items()}


# What read_json_object adds when hyperparameters.json is larger than any configuration file.
TOO_LARGE_HINT = (
    f"; SageMaker takes at most {SAGEMAKER_MAX_HYPERPARAMETERS} hyperparameters, with names of up to "
    f"{SAGEMAKER_MAX_HYPERPARAMETER_NAME} and values of up to {SAGEMAKER_MAX_HYPERPARAMETER_VALUE:,} "
    "characters, which fit in far less: pass large settings as a file in a data channel"
)


def check_hyperparameter_sizes(raw: Mapping[str, Any], source: Path) -> None:
    """Refuse more hyperparameters, or a longer name or value, than this image takes (config/limits.py),
    naming the limit, SageMaker's own and the field. Values are measured as SageMaker measures them:
    the JSON text it was given, before decoding."""
    if len(raw) > MAX_HYPERPARAMETERS:
        raise UserError(
            f"{source} holds {len(raw):,} hyperparameters, more than the {MAX_HYPERPARAMETERS} this image "
            f"takes (SageMaker takes {SAGEMAKER_MAX_HYPERPARAMETERS} in a training job, more only in a "
            "tuning job's); pass the rest as a file in a data channel"
        )
    for key, value in raw.items():
        if len(key) > MAX_HYPERPARAMETER_NAME:
            raise UserError(
                f"{source} field {quoted(key)}: a hyperparameter name may be at most "
                f"{MAX_HYPERPARAMETER_NAME} characters long (SageMaker's limit); shorten it"
            )
        length = len(value) if isinstance(value, str) else len(json.dumps(value))
        if length > MAX_HYPERPARAMETER_VALUE:
            raise UserError(
                f"{source} field {quoted(key)} has a value of {length:,} characters, more than the "
                f"{MAX_HYPERPARAMETER_VALUE:,} this image takes (SageMaker takes "
                f"{SAGEMAKER_MAX_HYPERPARAMETER_VALUE:,}); put the value in a file in a data channel and "
                "pass its path instead"
            )


def read_hyperparameters(raw: Mapping[str, Any], source: Path) -> dict[str, Any]:
    """The decoded hyperparameters of ``source``, checked: every one becomes ``--name value`` and
    ``SM_HP_<NAME>``, so too many, or a name or value neither can carry, is refused, naming it."""
    check_hyperparameter_sizes(raw, source)
    decoded = {}
    for key, value in raw.items():
        try:
            decoded[key] = decode_value(value)
        except RecursionError:
            raise UserError(f"{source} field {key!r} nests JSON too deeply to read; flatten it") from None
    check_texts(decoded, source)
    for key in decoded:
        if not key or "=" in key:
            raise UserError(
                f"{source} field {key!r}: a hyperparameter name must be non-empty and may not contain '='; "
                "rename it"
            )
    return decoded


def is_user_key(key: str) -> bool:
    return not (
        key.startswith(SAGEMAKER_PREFIX) or key.startswith(SAGETRAIN_PREFIX) or key in TOOLKIT_RESERVED_KEYS
    )


def user_hyperparameters(decoded: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in decoded.items() if is_user_key(k)}


class HyperparameterReader:
    """Typed values from the decoded hyperparameters; every error names the file, the field and the
    value. Lenient as a user typing values means them: ``"4"`` and ``4.0`` are the integer 4."""

    def __init__(self, decoded: Mapping[str, Any], source: Path) -> None:
        self.decoded = decoded
        self.source = source

    def bad(self, key: str, expected: str) -> UserError:
        return UserError(f"{self.source} field {key} must be {expected}, got {self._shown(key)}")

    def _shown(self, key: str) -> str:
        """The value of ``key`` as a message quotes it: masked before it is quoted (a secret nested in a
        dict value is masked in any quoting), and without a walk Python's recursion limit would stop."""
        if looks_secret(key):
            return MASK
        value = self.decoded[key]
        try:
            return quoted(masked_value(key, value))
        except RecursionError:
            return "a value nested too deeply to quote"

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.decoded.get(key, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self.bad(key, "true or false")

    def integer(self, key: str, *, minimum: int = 0) -> int | None:
        """None when absent or null."""
        value = self.decoded.get(key)
        if value is None:
            return None
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str):
            with contextlib.suppress(ValueError):
                number = int(value.strip())
        if number is None or number < minimum:
            raise self.bad(key, f"an integer >= {minimum}")
        return number

    def number(self, key: str, *, minimum: float = -math.inf, above: bool = False) -> float | None:
        """A finite number >= ``minimum`` (> it when ``above``); None when absent or null. JSON's
        Infinity and NaN decode to floats, but mean nothing as a rate, a count or a wait."""
        value = self.decoded.get(key)
        if value is None:
            return None
        number: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            with contextlib.suppress(ValueError):
                number = float(value)
        in_range = number is not None and (number > minimum if above else number >= minimum)
        if number is None or not math.isfinite(number) or not in_range:
            raise self.bad(key, _number_kind(minimum, above))
        return number

    def log_level(self, key: str) -> int | None:
        """A logging level (see ``log_level``); None when absent or null."""
        value = self.decoded.get(key)
        if value is None:
            return None
        level = log_level(value)
        if level is None:
            raise self.bad(key, LOG_LEVEL_EXPECTED)
        return level

    def text(self, key: str) -> str | None:
        value = self.decoded.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.bad(key, "a string")
        return value

    def choice(self, key: str, kind: type[E], default: E) -> E:
        value = self.decoded.get(key, default.value)
        try:
            return kind(value)
        except ValueError:
            raise self.bad(key, f"one of {[item.value for item in kind]}") from None

    def names(self, key: str) -> tuple[str, ...]:
        """A list of names, or one string of comma-separated names (``"accuracy, auc"``)."""
        value = self.decoded.get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
            return tuple(value)
        raise self.bad(key, "a name or a list of names")

    def arguments(self, key: str) -> tuple[str, ...]:
        """A command-line fragment split as a shell splits it (quotes group, backslashes escape)."""
        value = self.text(key)
        if not value:
            return ()
        try:
            return tuple(shlex.split(value))
        except ValueError as error:  # shlex: "No closing quotation", "No escaped character"
            raise UserError(
                f"{self.source} field {key} cannot be split into mpirun arguments ({error}): "
                f"{masked_options_text(value)!r}; close the quote or escape it with a backslash"
            ) from None

    def mpi_options(self, key: str) -> tuple[str, ...]:
        """mpirun options, without those that set how many ranks run where: the plan owns them."""
        tokens = self.arguments(key)
        owned = [flag for option, flag in options(tokens) if option in PLAN_OWNED]
        if owned:
            raise UserError(
                f"{self.source} field {key} sets {owned[0]} ({masked_options_text(self.decoded[key])!r}), "
                "but the launcher decides how many ranks run on which hosts; remove it and set "
                f"{PROCESSES_PER_HOST_KEY} (ranks per host) or {NUM_PROCESSES_KEY} (fewer ranks in all) "
                "instead"
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
            raise self.bad(key, "a list of instance group names")
        return tuple(value)


LOG_LEVEL_NAMES = {name: getattr(logging, name) for name in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")}
LOG_LEVEL_EXPECTED = (
    f"a logging level (a number from 0 to {logging.CRITICAL}, or one of {', '.join(LOG_LEVEL_NAMES)})"
)


def log_level(value: object) -> int | None:
    """A logging level as SageMaker's SDKs send it (``logging.INFO``, i.e. 20, as JSON) or by name
    (``"ERROR"``); None when ``value`` is neither. Pure."""
    if isinstance(value, str):
        name = value.strip().upper()
        if name in LOG_LEVEL_NAMES:
            return int(LOG_LEVEL_NAMES[name])
        with contextlib.suppress(ValueError):
            value = int(name)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= logging.CRITICAL:
        return value
    return None


def _number_kind(minimum: float, above: bool) -> str:
    if minimum == -math.inf:
        return "a finite number"
    if minimum == 0 and above:
        return "a positive, finite number"
    return f"a finite number {'>' if above else '>='} {minimum:g}"


@dataclass(frozen=True)
class LaunchSettings:
    """Our own ``sagetrain_*`` hyperparameters: each field is read from ``sagetrain_<field>``."""

    coordinator_port: int = 7077
    ssh_port: int = 22
    worker_wait_seconds: float = 600.0
    launch_wait_seconds: float = 300.0  # mpirun: from its start until every rank has started
    tf_config_port: int = 2222
    ps_port: int = 2223
    # A secret every host proves membership of the job with (config/job_secret.py): in clear in the
    # job's description, unlike the file in the channel job_secret_channel names.
    job_secret: str = dataclasses.field(default="", repr=False)
    job_secret_channel: str = ""
    # Every program runs with tf-keras as both `keras` and `tf.keras` (sagetrain/legacy_keras.py).
    legacy_keras: bool = False
    # Every port the job's processes listen on takes connections only from the job's hosts and loopback
    # (launch/members.py). Off: any peer on the job's network reaches them, as with any TensorFlow or MPI
    # cluster (for a program that must take connections from elsewhere).
    members_only_ports: bool = True
    # The most a code archive may unpack to (program/archive.py; the volume's free room is checked too):
    # far above any real code (the SDK's source_dir tarballs run to megabytes), low enough that an
    # archive bomb is refused on a large volume too, and few enough members for tarfile's list of them
    # (about 0.5 KB each) to stay small.
    code_archive_max_bytes: int = 4 << 30
    code_archive_max_members: int = 200_000
    # From the stop signal to this container's exit (launch/stop.py): None means the platform's window
    # (SageMaker's 120 s less a margin; SDK local mode's 10 s less a margin).
    stop_seconds: float | None = None

    @staticmethod
    def key(field: str) -> str:
        return SAGETRAIN_PREFIX + field

    @classmethod
    def known_keys(cls) -> tuple[str, ...]:
        return tuple(cls.key(field.name) for field in dataclasses.fields(cls))


@dataclass(frozen=True)
class JobSettings:
    """The engine and launch settings a job's hyperparameters carry (SDK names plus our own)."""

    program: str | None = None
    submit_directory: str | None = None
    job_name: str | None = None
    enabled_engines: tuple[Engine, ...] = ()  # those whose sagemaker_*_enabled is true, registry order
    mpi_processes_per_host: int | None = None
    mpi_num_processes: int | None = None
    custom_mpi_options: tuple[str, ...] = ()  # split as a shell would, so mpirun gets them as written
    smddp_enabled: bool = False
    network_interface_name: str | None = None
    distribution_instance_groups: tuple[str, ...] | None = None
    log_level: int | None = None  # for the image's own lines, not the program's; None: not set
    launch: LaunchSettings = dataclasses.field(default_factory=LaunchSettings)

    @property
    def toolkit_log_level(self) -> int:
        """The level the image's own lines are logged at: INFO unless the job sets one."""
        return logging.INFO if self.log_level is None else self.log_level


def _known_settings(unknown: str, known: tuple[str, ...]) -> str:
    """What to say about an unknown ``sagetrain_*`` key: the known one it most likely misspells, else the
    list. Pure."""
    # Compared without the prefix every one of them shares.
    names = {key.removeprefix(SAGETRAIN_PREFIX): key for key in known}
    close = difflib.get_close_matches(unknown.removeprefix(SAGETRAIN_PREFIX), list(names), n=1, cutoff=0.6)
    if close:
        return f"did you mean {names[close[0]]}? (the README's hyperparameter table lists every setting)"
    return f"known: {', '.join(sorted(known))}"


def parse_launch_settings(read: HyperparameterReader) -> LaunchSettings:
    known = LaunchSettings.known_keys()
    unknown = sorted(k for k in read.decoded if k.startswith(SAGETRAIN_PREFIX) and k not in known)
    if unknown:
        raise UserError(
            f"{read.source} has unknown setting {unknown[0]}; {_known_settings(unknown[0], known)}"
        )
    values: dict[str, Any] = {}
    for field in dataclasses.fields(LaunchSettings):
        key = LaunchSettings.key(field.name)
        if field.type == "str":
            value: int | float | str | bool | None = read.text(key)
        elif field.type == "bool":
            value = read.boolean(key, default=field.default is True)
        elif field.name.endswith("_port"):
            port = read.integer(key, minimum=1)
            if port is not None and port > 65535:
                raise read.bad(key, "a TCP port (1-65535)")
            value = port
        elif field.type == "int":
            value = read.integer(key, minimum=1)
        else:
            value = read.number(key, minimum=0.0, above=True)
        if value is not None:
            values[field.name] = value
    return LaunchSettings(**values)


def parse_settings(decoded: Mapping[str, Any], source: Path) -> JobSettings:
    read = HyperparameterReader(decoded, source)
    groups = read.string_list(DISTRIBUTION_GROUPS_KEY)
    if groups is None:
        groups = read.string_list("sagemaker_instance_groups")
    return JobSettings(
        program=read.text(PROGRAM_KEY),
        submit_directory=read.text("sagemaker_submit_directory"),
        job_name=read.text("sagemaker_job_name"),
        enabled_engines=tuple(
            engine
            for engine, entry in REGISTRY.items()
            if entry.enabled_by is not None and read.boolean(entry.enabled_by)
        ),
        mpi_processes_per_host=read.integer(PROCESSES_PER_HOST_KEY, minimum=1),
        mpi_num_processes=read.integer(NUM_PROCESSES_KEY, minimum=1),
        custom_mpi_options=read.mpi_options(CUSTOM_MPI_OPTIONS_KEY),
        smddp_enabled=read.boolean(SMDDP_KEY),
        network_interface_name=read.text("sagemaker_network_interface_name") or None,
        distribution_instance_groups=groups,
        log_level=read.log_level(LOG_LEVEL_KEY),
        launch=parse_launch_settings(read),
    )


def with_environment(settings: JobSettings, environ: Mapping[str, str]) -> JobSettings:
    """``settings`` completed from the container's environment where the hyperparameters say nothing:
    the program a derived image names (``SAGEMAKER_PROGRAM``) and the toolkit's log level."""
    changes: dict[str, Any] = {}
    if settings.program is None and environ.get(PROGRAM_VAR):
        changes["program"] = environ[PROGRAM_VAR]
    if settings.log_level is None and environ.get(LOG_LEVEL_VAR):
        level = log_level(environ[LOG_LEVEL_VAR])
        if level is None:
            raise UserError(
                f"environment variable {LOG_LEVEL_VAR} is {quoted(environ[LOG_LEVEL_VAR])}; set it to "
                f"{LOG_LEVEL_EXPECTED}"
            )
        changes["log_level"] = level
    return dataclasses.replace(settings, **changes) if changes else settings
