"""What crosses a process boundary inside a job, spelled once: the ``SAGETRAIN_*`` variables every rank
gets, the rank's place in the job, the coordinator address, the per-rank error file, and the layout of
the job's run directory (host facts, rank registrations, error files, ssh files).

The entry writes these, the rank launcher and the managed trainer read them, and user programs may read
the rank variables too; every writer and reader imports this module. SageMaker's own names live where
they are read (``config/``) and the ``SM_*`` variables in ``config/toolkit_env.py``. Pure but for the
small readers and writers of the run directory's files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from sagetrain.atomic_file import write_atomically
from sagetrain.errors import PlatformError
from sagetrain.redact import Redactor

# The engine the job runs on: an Engine value (sagetrain/engines.py).
ENGINE_VAR = "SAGETRAIN_ENGINE"
# sagemaker_program as given, for messages about the program.
PROGRAM_VAR = "SAGETRAIN_PROGRAM"
MASTER_HOST_VAR = "SAGETRAIN_MASTER_HOST"
# host:port of the master's coordinator, where rank launchers report (loopback on one host).
COORDINATOR_VAR = "SAGETRAIN_COORDINATOR"
RANK_VAR = "SAGETRAIN_RANK"
LOCAL_RANK_VAR = "SAGETRAIN_LOCAL_RANK"
SIZE_VAR = "SAGETRAIN_SIZE"
LOCAL_SIZE_VAR = "SAGETRAIN_LOCAL_SIZE"
# Where a failing program may leave its one-sentence cause (see write_error_file).
ERROR_FILE_VAR = "SAGETRAIN_ERROR_FILE"
RUN_DIR_VAR = "SAGETRAIN_RUN_DIR"
# Optional, for the managed trainer: a folder for per-rank diagnostics.
TRAINER_REPORT_DIR_VAR = "SAGETRAIN_TRAINER_REPORT_DIR"
# TensorFlow's C++ log threshold. Every process of the job gets QUIET_TF_LOG_LEVEL unless the container's
# environment sets it: TensorFlow's start-up lines (INFO records) on every rank bury what a job prints.
TF_LOG_LEVEL_VAR = "TF_CPP_MIN_LOG_LEVEL"
QUIET_TF_LOG_LEVEL = "1"  # INFO records left out; warnings and errors kept


def tf_info_records_off(environ: Mapping[str, str]) -> bool:
    """Whether ``environ``'s TensorFlow log level leaves INFO records out: 1 or more (unset, or not a
    whole number, keeps them)."""
    try:
        return int(environ.get(TF_LOG_LEVEL_VAR, "0")) >= 1
    except ValueError:
        return False


# Set in the image; the test suite collects its in-image tests only where it is "1".
IN_IMAGE_VAR = "SAGETRAIN_IN_IMAGE"

# OpenMPI's names for what RANK_VAR... carry, on ranks mpirun started; PMI's rank, on ranks other MPI
# launchers started.
MPI_RANK_VAR = "OMPI_COMM_WORLD_RANK"
MPI_LOCAL_RANK_VAR = "OMPI_COMM_WORLD_LOCAL_RANK"
MPI_SIZE_VAR = "OMPI_COMM_WORLD_SIZE"
MPI_LOCAL_SIZE_VAR = "OMPI_COMM_WORLD_LOCAL_SIZE"
PMI_RANK_VAR = "PMI_RANK"
_MPI_PLACE_VARS = {
    RANK_VAR: MPI_RANK_VAR,
    LOCAL_RANK_VAR: MPI_LOCAL_RANK_VAR,
    SIZE_VAR: MPI_SIZE_VAR,
    LOCAL_SIZE_VAR: MPI_LOCAL_SIZE_VAR,
}

DEFAULT_RUN_DIR = Path("/run/sagetrain")
# Members-only ports (container/members-only/members_only.c): the library every process the job starts
# preloads, and the file in the run folder that lists the addresses of the job's hosts, one per line. The
# library finds the file as <$RUN_DIR_VAR or DEFAULT_RUN_DIR>/MEMBERS_FILE_NAME; it is built with these
# names (members_filter_defines).
MEMBERS_FILTER_LIBRARY = Path("/usr/local/lib/sagetrain/libsagetrain-members-only.so")
MEMBERS_FILE_NAME = "members"
PRELOAD_VAR = "LD_PRELOAD"
# A variable too long for the environment (see launch/spec.py) is passed as a file: <NAME>_FILE names it.
FILE_VAR_SUFFIX = "_FILE"
# The rank launcher's option naming a JSON list of arguments it appends to the program's (arguments too
# long to pass through mpirun, which copies them into one variable of every rank).
ARGS_FILE_OPTION = "--args-file"


class RankPlaceError(PlatformError):
    """The rank variables are missing or contradict each other: the launcher's fault, not the user's."""


@dataclass(frozen=True)
class RankPlace:
    """A rank's place in the job: its rank and the job's size, on its host and overall."""

    rank: int
    size: int
    local_rank: int = 0
    local_size: int = 1

    def __post_init__(self) -> None:
        if not (0 <= self.rank < self.size and 0 <= self.local_rank < self.local_size <= self.size):
            raise RankPlaceError(
                f"{RANK_VAR}={self.rank}, {LOCAL_RANK_VAR}={self.local_rank}, {SIZE_VAR}={self.size}, "
                f"{LOCAL_SIZE_VAR}={self.local_size} are inconsistent"
            )

    def to_env(self) -> dict[str, str]:
        return {
            RANK_VAR: str(self.rank),
            LOCAL_RANK_VAR: str(self.local_rank),
            SIZE_VAR: str(self.size),
            LOCAL_SIZE_VAR: str(self.local_size),
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RankPlace:
        """The place the variables give: OpenMPI's where mpirun started the rank, else ours; one
        process (rank 0 of 1) when neither is set, and every rank on one host when the local ones are
        not."""

        def number(name: str, default: int) -> int:
            value = environ.get(_MPI_PLACE_VARS[name]) or environ.get(name)
            if not value:
                return default
            try:
                return int(value)
            except ValueError:
                raise RankPlaceError(f"{name} must be an integer, got {value!r}") from None

        size = number(SIZE_VAR, 1)
        return cls(
            rank=number(RANK_VAR, 0),
            size=size,
            local_rank=number(LOCAL_RANK_VAR, 0),
            local_size=number(LOCAL_SIZE_VAR, size),
        )


ONE_PROCESS = RankPlace(rank=0, size=1)


def members_filter_defines() -> list[str]:
    """The C definitions the members-only library is compiled with (container/build-steps/
    build-members-only): the names it shares with the launcher, as string literals. Pure."""
    names = {
        "RUN_DIR_VAR": RUN_DIR_VAR,
        "DEFAULT_RUN_DIR": str(DEFAULT_RUN_DIR),
        "MEMBERS_FILE_NAME": MEMBERS_FILE_NAME,
    }
    return [f"-D{macro}={json.dumps(value)}" for macro, value in names.items()]


def coordinator_value(host: str, port: int) -> str:
    """COORDINATOR_VAR's value."""
    return f"{host}:{port}"


def parse_coordinator(value: str, own_host: str) -> tuple[str, int] | None:
    """(host, port) from COORDINATOR_VAR's value; loopback when the coordinator runs on ``own_host``;
    None when the value is not ``host:port``."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        return None
    return ("127.0.0.1" if host == own_host else host), int(port)


def canonical_json(value: object) -> bytes:
    """The bytes a MAC or a key covers: JSON with sorted keys, no spaces, ASCII only, so that every host
    makes the same bytes of the same value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def write_error_file(path: Path, message: str, traceback: str = "") -> None:
    """What a failing program tells its rank launcher: one sentence, and the traceback, if any."""
    write_atomically(path, json.dumps({"message": message, "traceback": traceback}))


def read_error_file(path: Path) -> tuple[str, str]:
    """(message on one line, traceback) from a program's error file; empty when there is none or it is
    not ours to read (a program may write anything there)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "", ""
    if not isinstance(value, dict):
        return "", ""
    return " ".join(str(value.get("message", "")).split()), str(value.get("traceback", ""))


@dataclass(frozen=True)
class HostFacts:
    """What a host's entry detected, for the ranks mpirun starts there with the master's environment
    (a rank launcher that ran nvidia-smi itself would cost a second or more on some GPU hosts)."""

    host: str
    num_gpus: int
    num_cpus: int


@dataclass(frozen=True)
class RunDir:
    """This host's scratch space for the job, outside /opt/ml (nothing there is the user's):

    ``host.json``        HostFacts, written by the entry before the job starts
    ``host-env.json``    the variables that stay on this host (credentials, secrets), owner-only
    ``host.key``         this host's proof of membership of the job (config/job_secret.py), owner-only
    ``masked.json``      the values every line about the job masks, as this host read them, owner-only
    ``ranks/<pid>``      one per running rank launcher (pid), holding its program's pid
    ``errors/rank-N.json``  rank N's error file
    ``ssh/``             sshd's and mpirun's keys and files (launch/sshd.py)
    ``env/<NAME>``       the value of a variable too long for the environment
    ``args.json``        the program's arguments, when too long for mpirun's command line
    ``sdk-mpirun/``      the ``mpirun`` put first on the SageMaker SDK's MPI driver's PATH (sdk/mpirun.py)
    ``members``          the addresses of the job's hosts, one per line: who the job's ports take
                         connections from (MEMBERS_FILTER_LIBRARY), readable by every user
    ``ps/``              the parameter server task's scratch folder, its own user's alone
    ``listings/``        each channel's listing and deal, made by the first of this host's ranks for the
                         others (trainer/host_once.py), owner-only; emptied at every start

    Other users may pass through the folder but not list it; what holds a secret is its owner's alone.
    """

    root: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RunDir:
        value = environ.get(RUN_DIR_VAR)
        return cls(Path(value) if value else DEFAULT_RUN_DIR)

    @property
    def host_facts_file(self) -> Path:
        return self.root / "host.json"

    @property
    def ranks(self) -> Path:
        return self.root / "ranks"

    def rank_registration(self, launcher_pid: int) -> Path:
        return self.ranks / str(launcher_pid)

    def error_file(self, rank: int) -> Path:
        return self.root / "errors" / f"rank-{rank}.json"

    def env_file(self, name: str) -> Path:
        return self.root / "env" / name

    @property
    def args_file(self) -> Path:
        return self.root / "args.json"

    @property
    def ssh(self) -> Path:
        return self.root / "ssh"

    @property
    def sdk_mpirun(self) -> Path:
        return self.root / "sdk-mpirun"

    @property
    def members_file(self) -> Path:
        return self.root / MEMBERS_FILE_NAME

    @property
    def ps_scratch(self) -> Path:
        return self.root / "ps"

    @property
    def listings(self) -> Path:
        return self.root / "listings"

    def write_host_facts(self, facts: HostFacts) -> Path:
        path = self.host_facts_file
        try:
            write_atomically(path, json.dumps(asdict(facts)))
        except OSError as error:
            raise PlatformError(
                f"cannot write {path} ({error.strerror or error}); {RUN_DIR_VAR} must name a folder this "
                "host can write"
            ) from None
        return path

    @property
    def host_key_file(self) -> Path:
        return self.root / "host.key"

    def write_host_key(self, key: bytes) -> None:
        write_atomically(self.host_key_file, key.hex(), private=True)

    def read_host_key(self) -> bytes | None:
        try:
            return bytes.fromhex(self.host_key_file.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None

    @property
    def masked_file(self) -> Path:
        return self.root / "masked.json"

    def write_masked(self, redactor: Redactor) -> None:
        """The job's secrets as this host read them, for what reports from here without reading them again
        (the rank launchers)."""
        write_atomically(self.masked_file, json.dumps(list(redactor.secrets)), private=True)

    def read_masked(self) -> Redactor:
        """What ``write_masked`` wrote; nothing to mask when nothing was."""
        try:
            values = json.loads(self.masked_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return Redactor()
        return Redactor.of(values) if isinstance(values, list) else Redactor()

    @property
    def host_env_file(self) -> Path:
        return self.root / "host-env.json"

    def write_host_env(self, env: Mapping[str, str]) -> None:
        """The variables mpirun does not copy between hosts, for the ranks started on this host."""
        write_atomically(self.host_env_file, json.dumps(dict(env)), private=True)

    def read_host_env(self) -> dict[str, str]:
        try:
            value = json.loads(self.host_env_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(value, dict):
            return {}
        return {str(name): str(text) for name, text in value.items()}

    def read_host_facts(self, host: str) -> HostFacts | None:
        """``host``'s facts; None when there are none, or they are another host's."""
        try:
            raw = json.loads(self.host_facts_file.read_text(encoding="utf-8"))
            facts = HostFacts(str(raw["host"]), int(raw["num_gpus"]), int(raw["num_cpus"]))
        except (OSError, ValueError, TypeError, KeyError):
            return None
        return facts if facts.host == host else None
