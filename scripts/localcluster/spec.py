"""What a job is: the errors and their exit codes (DockerError, for EXIT_DOCKER, is dockercli.py's), the
enums, the frozen specs and results, and the pure parsing of hosts, hyperparameters, channels (their
input modes included), instance groups and types, container paths, stop timeouts and start delays from
flag values."""

from __future__ import annotations

import enum
import json
import posixpath
import re
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sagetrain.config.channels import CHANNEL_NAME, Channel, InputMode, S3Distribution
from sagetrain.config.paths import DEFAULT_ROOT, Paths
from sagetrain.config.resources import DEFAULT_INSTANCE_GROUP, LOCAL_INSTANCE_TYPE, InstanceGroup

EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_DOCKER = 125
HOST_DIR_PATTERN = re.compile(r"^algo-(\d+)$")
# SDK local mode's `docker stop` window (and `docker create --stop-timeout`); SageMaker itself gives 120 s.
SDK_LOCAL_STOP_TIMEOUT_SECONDS = 10
MAX_STOP_TIMEOUT_SECONDS = 86_400  # a day: the runner's waits after a stop grow with it
# The instance types a resourceconfig.json names: SDK local mode's, or a SageMaker type like ml.c5.xlarge.
INSTANCE_TYPE = re.compile(r"local|local_gpu|ml\.[a-z0-9-]+\.[a-z0-9]+")
# Where --checkpoints is mounted when the job names no other checkpoint folder: SageMaker's default.
DEFAULT_CHECKPOINT_DIR = str(Paths(DEFAULT_ROOT).checkpoint_dir)
DEFAULT_TENSORBOARD_DIR = str(Paths(DEFAULT_ROOT).tensorboard_dir)  # SageMaker's, for --help


class UsageError(Exception):
    """A flag or file given to this tool is wrong; the message says which and what to do."""


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class HostState(enum.Enum):
    """created → (started → exited) | never_started. A host whose start was still pending when the job
    ended is never started."""

    CREATED = "created"
    STARTED = "started"
    EXITED = "exited"
    NEVER_STARTED = "never_started"


@dataclass(frozen=True)
class ChannelSource:
    """A channel of the job and the local folder (or file) its data is copied from."""

    channel: Channel
    source: Path

    @property
    def name(self) -> str:
        return self.channel.name


@dataclass(frozen=True)
class ContainerLimits:
    gpus: str | None = None
    cpus: str | None = None
    memory: str | None = None
    shm_size: str | None = "1g"
    ulimits: tuple[str, ...] = ()  # docker's --ulimit values, e.g. "nofile=1024:1024"


@dataclass(frozen=True)
class TreeSpec:
    """What goes into every host's /opt/ml tree."""

    hosts: tuple[str, ...]
    code_dir: Path | None
    program: str | None
    channels: tuple[ChannelSource, ...] = ()
    hyperparameters: Mapping[str, object] = field(default_factory=dict)
    instance_groups: tuple[InstanceGroup, ...] = ()
    distribution_instance_groups: tuple[str, ...] = ()
    network_interface: str = "eth0"
    job_name: str = "local-cluster"
    region: str = "us-east-1"
    checkpoint_local_path: str | None = None  # checkpointconfig.json's LocalPath; None: no such file
    tensorboard_local_path: str | None = None  # tensorboardoutputconfig.json's LocalPath; None: no file


@dataclass(frozen=True)
class RunSpec:
    """How the containers are run."""

    image: str
    hosts: tuple[str, ...]
    job_name: str
    limits: ContainerLimits = ContainerLimits()
    env: tuple[tuple[str, str], ...] = ()
    start_delays: Mapping[str, float] = field(default_factory=dict)
    checkpoints: Path | None = None  # the host folder mounted at checkpoint_dir on every host
    checkpoint_dir: str = DEFAULT_CHECKPOINT_DIR  # the job's checkpoint folder in the containers
    timeout_seconds: float | None = None
    stop_timeout_seconds: int = SDK_LOCAL_STOP_TIMEOUT_SECONDS  # `docker stop -t` of the hosts
    grace_seconds: float = 0.0
    docker: str = "docker"
    hostname_is_host: bool = False  # else the container id, as in SageMaker local mode


@dataclass
class HostStatus:
    host: str
    container: str
    state: HostState = HostState.CREATED
    exit_code: int | None = None
    started_at: float | None = None  # wall clock, from the docker engine when known
    exited_at: float | None = None  # wall clock, from the docker engine when known
    stopped_by_runner: bool = False


@dataclass(frozen=True)
class JobResult:
    verdict: int
    first_host: str | None
    reason: str
    hosts: tuple[HostStatus, ...]


def host_names(count: int) -> tuple[str, ...]:
    if count < 1:
        raise UsageError(f"--hosts must be at least 1, got {count}.")
    return tuple(f"algo-{index}" for index in range(1, count + 1))


def split_assignment(text: str, flag: str) -> tuple[str, str]:
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise UsageError(f"{flag} expects KEY=VALUE, got {text!r}.")
    return key, value


def parse_hp_value(text: str) -> object:
    """`epochs=3` means the number 3 and `name=adam` the string "adam", as a user typing it means it:
    a value that parses as JSON is that JSON value, anything else is a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_hp_pairs(pairs: Iterable[str]) -> dict[str, object]:
    result: dict[str, object] = {}
    for pair in pairs:
        key, value = split_assignment(pair, "--hp")
        result[key] = parse_hp_value(value)
    return result


def parse_hp_json(text: str, read_file: Callable[[Path], str] = lambda path: path.read_text()) -> dict:
    """--hp-json takes a file path or inline JSON; either must hold one JSON object."""
    candidate = Path(text)
    source = "--hp-json"
    if not text.lstrip().startswith("{") and candidate.is_file():
        source = f"--hp-json file {text}"
        text = read_file(candidate)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{source} is not valid JSON ({error.msg} at line {error.lineno}).") from None
    if not isinstance(value, dict):
        raise UsageError(f"{source} must be a JSON object of hyperparameters, got {type(value).__name__}.")
    return value


def parse_instance_type(text: str) -> str:
    if not INSTANCE_TYPE.fullmatch(text):
        raise UsageError(
            f"--instance-type {text!r} is not an instance type; give local (SDK local mode's), local_gpu "
            "or a SageMaker type such as ml.c5.xlarge."
        )
    return text


def parse_instance_groups(
    texts: Sequence[str], hosts: tuple[str, ...], instance_type: str = LOCAL_INSTANCE_TYPE
) -> tuple[InstanceGroup, ...]:
    """`NAME=COUNT` flags hand out hosts in order; their counts must add up to --hosts. Every group,
    SageMaker's one group of every host when none is given, has ``instance_type``."""
    if not texts:
        return (InstanceGroup(DEFAULT_INSTANCE_GROUP, instance_type, hosts),)
    groups: list[InstanceGroup] = []
    next_host = 0
    for text in texts:
        name, count_text = split_assignment(text, "--instance-group")
        if not count_text.isdigit() or int(count_text) < 1:
            raise UsageError(f"--instance-group {text!r}: the count must be a positive integer.")
        count = int(count_text)
        groups.append(InstanceGroup(name, instance_type, hosts[next_host : next_host + count]))
        next_host += count
    if next_host != len(hosts):
        raise UsageError(f"--instance-group counts add up to {next_host}, but --hosts is {len(hosts)}.")
    if len({group.name for group in groups}) != len(groups):
        raise UsageError("--instance-group names must be unique.")
    return tuple(groups)


def parse_channels(
    texts: Sequence[str],
    content_types: Sequence[str],
    sharded: Sequence[str],
    input_modes: Sequence[str] = (),
) -> tuple[ChannelSource, ...]:
    types = dict(split_assignment(text, "--content-type") for text in content_types)
    modes = parse_input_modes(input_modes)
    channels: list[ChannelSource] = []
    for text in texts:
        name, source = split_assignment(text, "--channel")
        if not CHANNEL_NAME.fullmatch(name):
            raise UsageError(
                f"--channel name {name!r} may hold only letters, digits, '_', '.', '-' (at most 64)."
            )
        distribution = (
            S3Distribution.SHARDED_BY_S3_KEY if name in sharded else S3Distribution.FULLY_REPLICATED
        )
        mode = modes.get(name, InputMode.FILE)
        channel = Channel(name, input_mode=mode, s3_distribution=distribution, content_type=types.get(name))
        channels.append(ChannelSource(channel, Path(source)))
    names = [channel.name for channel in channels]
    for name in set(types) | set(sharded) | set(modes):
        if name not in names:
            raise UsageError(
                f"--content-type/--sharded/--input-mode name a channel {name!r} that no --channel gives."
            )
    if len(set(names)) != len(names):
        raise UsageError("each --channel name may be given once.")
    return tuple(channels)


def parse_input_modes(texts: Sequence[str]) -> dict[str, InputMode]:
    """`NAME=File|FastFile|Pipe`, spelled as SageMaker's TrainingInputMode is; once per channel."""
    modes: dict[str, InputMode] = {}
    for text in texts:
        name, value = split_assignment(text, "--input-mode")
        try:
            mode = InputMode(value)
        except ValueError:
            known = "|".join(member.value for member in InputMode)
            raise UsageError(f"--input-mode {text!r}: the mode must be one of {known}.") from None
        if name in modes:
            raise UsageError(f"--input-mode names channel {name!r} twice; give its mode once.")
        modes[name] = mode
    return modes


def parse_container_folder(text: str, flag: str) -> str:
    """A folder inside the containers, as a LocalPath of SageMaker's output configurations is: absolute."""
    if not PurePosixPath(text).is_absolute() or "\0" in text:
        raise UsageError(f"{flag} {text!r} must be an absolute folder path in the containers (from /).")
    return text


def checkpoint_mount_target(local_path: str, flag: str) -> str:
    """Where --checkpoints is mounted for a job whose checkpoint folder is ``local_path``: that folder,
    unless a mount there would hide what the host tree gives the job, or docker's --mount syntax cannot
    carry it."""
    target = posixpath.normpath(local_path)
    tree = Paths(DEFAULT_ROOT)
    hidden = (tree.config_dir, tree.data_dir, tree.code_dir, tree.model_dir, tree.output_data_dir)
    covered = next((str(folder) for folder in hidden if folder.is_relative_to(target)), None)
    if covered is not None:
        raise UsageError(
            f"{flag} {local_path!r}: --checkpoints mounted there would hide {covered} of the host tree; "
            f"choose a folder such as {DEFAULT_CHECKPOINT_DIR}."
        )
    if "," in target or '"' in target:
        raise UsageError(
            f"{flag} {local_path!r}: --checkpoints cannot be mounted at a path with ',' or '\"'."
        )
    return target


def parse_stop_timeout(text: str) -> int:
    """`docker stop -t` takes whole seconds; 0 kills at once."""
    if not re.fullmatch(r"[0-9]{1,6}", text) or int(text) > MAX_STOP_TIMEOUT_SECONDS:
        raise UsageError(
            f"--stop-timeout {text!r} must be whole seconds from 0 to {MAX_STOP_TIMEOUT_SECONDS} "
            f"({SDK_LOCAL_STOP_TIMEOUT_SECONDS} in SDK local mode, 120 on SageMaker)."
        )
    return int(text)


def parse_start_delays(texts: Sequence[str], hosts: tuple[str, ...]) -> dict[str, float]:
    delays: dict[str, float] = {}
    for text in texts:
        host, seconds = split_assignment(text, "--start-delay")
        if host not in hosts:
            raise UsageError(f"--start-delay names host {host!r}; the hosts are {', '.join(hosts)}.")
        try:
            delays[host] = float(seconds)
        except ValueError:
            raise UsageError(f"--start-delay {text!r}: seconds must be a number.") from None
    return delays


def default_job_name(now: float, token: str) -> str:
    return f"local-cluster-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{token}"


def hosts_in_workdir(names: Iterable[str]) -> tuple[str, ...]:
    indexed = sorted(int(match.group(1)) for name in names if (match := HOST_DIR_PATTERN.match(name)))
    if not indexed:
        raise UsageError("the work directory holds no algo-N host trees.")
    return tuple(f"algo-{index}" for index in indexed)
