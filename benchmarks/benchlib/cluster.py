"""Run one training job of N hosts (containers algo-1..N on an --internal network) and keep what the
figures need: each container's start and exit time and every log line with the time Docker received it.

The /opt/ml trees are written by `scripts/local-cluster --write-only`, so both images under comparison
see exactly the files SageMaker would give them. The containers are driven here, not by local-cluster,
because the figures need Docker's own StartedAt/FinishedAt and time-stamped logs, which local-cluster
does not keep, and because every host must be allowed to end on its own (teardown is what is measured).
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from localcluster.dockercli import DockerCli, DockerError, parse_docker_time
from sagetrain.deadline import Deadline

from benchlib.created import Created

REPO = Path(__file__).resolve().parents[2]
LOCAL_CLUSTER = REPO / "scripts" / "local-cluster"


class JobFailed(Exception):
    """A benchmark job did not succeed; the message names the host and quotes its last lines."""


@dataclass(frozen=True)
class JobSpec:
    image: str
    hosts: int
    code: Path
    program: str
    hyperparameters: Mapping[str, object] = field(default_factory=dict)
    channels: Mapping[str, Path] = field(default_factory=dict)
    sharded: tuple[str, ...] = ()  # channels with S3DistributionType ShardedByS3Key
    entrypoint: str | None = None
    command: tuple[str, ...] = ("train",)
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, Path] = field(default_factory=dict)  # container path -> host file, read-only
    shared: Mapping[str, Path] = field(default_factory=dict)  # container path -> host folder all hosts write
    timeout_seconds: float = 600.0


@dataclass(frozen=True)
class LogLine:
    at: float
    text: str


@dataclass(frozen=True)
class HostRun:
    host: str
    exit_code: int
    started_at: float
    finished_at: float
    log: tuple[LogLine, ...]

    def lines_with(self, marker: str) -> list[LogLine]:
        return [line for line in self.log if marker in line.text]

    def tail(self, count: int = 15) -> str:
        return "\n".join(f"    {self.host} | {line.text}" for line in self.log[-count:])


@dataclass(frozen=True)
class JobRun:
    image: str
    hosts: tuple[HostRun, ...]
    start_issued: float  # wall clock just before `docker start` of every container

    @property
    def first_start(self) -> float:
        return min(host.started_at for host in self.hosts)

    @property
    def last_start(self) -> float:
        return max(host.started_at for host in self.hosts)

    @property
    def last_exit(self) -> float:
        return max(host.finished_at for host in self.hosts)

    @property
    def wall_seconds(self) -> float:
        """The whole job as its user waits for it: the first container's start → the last one's exit
        (Docker's StartedAt and FinishedAt)."""
        return self.last_exit - self.first_start

    def require_success(self) -> JobRun:
        for host in self.hosts:
            if host.exit_code != 0:
                raise JobFailed(
                    f"{self.image}: {host.host} exited with code {host.exit_code}; last lines:\n{host.tail()}"
                )
        return self

    def lines_with(self, marker: str) -> list[LogLine]:
        return sorted((line for host in self.hosts for line in host.lines_with(marker)), key=lambda x: x.at)

    def stamps(self, key: str) -> list[float]:
        """Every ``key=<seconds>`` the job's hosts printed. Each host's log is searched as one text, its
        lines joined without a break: AWS's toolkit passes mpirun's output on in chunks, which puts
        several ranks' lines on one log line and can cut one line in two."""
        pattern = re.compile(rf"\b{re.escape(key)}=(\d+(?:\.\d+)?)")
        texts = ("".join(line.text for line in host.log) for host in self.hosts)
        return [float(value) for text in texts for value in pattern.findall(text)]

    def bench_fields(self, marker: str) -> list[dict[str, str]]:
        """The ``key=value`` fields of every ``marker`` (e.g. ``BENCH read impl=plain ``) the job's hosts
        printed, host by host, each host's in the order printed. A host's log is searched as one text:
        processes printing at the same moment can put two ``BENCH`` lines on one log line, so a record ends
        at the next line or the next ``BENCH``."""
        found = []
        for host in self.hosts:
            text = "\n".join(line.text for line in host.log)
            for start in re.finditer(re.escape(marker), text):
                end = _NEXT_BENCH_LINE.search(text, start.end())
                found.append(field_values(text[start.end() : end.start() if end else len(text)]))
        return found


_NEXT_BENCH_LINE = re.compile(r"\n|BENCH ")


def field_values(text: str) -> dict[str, str]:
    """``key=value`` words of a log line (mpirun may prefix ranks' lines with tags; they are ignored)."""
    pairs = (word.split("=", 1) for word in text.split() if "=" in word)
    return {key: value for key, value in pairs}


def write_trees(spec: JobSpec, job_name: str, trees: Path) -> None:
    command = [
        str(LOCAL_CLUSTER), "--image", spec.image, "--hosts", str(spec.hosts),
        "--code", str(spec.code), "--program", spec.program,
        "--hp-json", json.dumps(dict(spec.hyperparameters)),
        "--job-name", job_name, "--write-only", "--workdir", str(trees),
    ]  # fmt: skip
    for name, path in spec.channels.items():
        command += ["--channel", f"{name}={path}"]
    for name in spec.sharded:
        command += ["--sharded", name]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise JobFailed(f"local-cluster could not write the host trees: {done.stderr.strip() or done.stdout}")


def _read_log(docker: DockerCli, container: str) -> tuple[LogLine, ...]:
    lines = []
    for raw in docker.logs(container, timestamps=True).splitlines():
        stamp, _, text = raw.partition(" ")
        at = parse_docker_time(stamp)
        lines.append(LogLine(at, text) if at is not None else LogLine(0.0, raw))
    return tuple(sorted(lines, key=lambda line: line.at))


def _engine_time(text: str, container: str) -> float:
    at = parse_docker_time(text)
    if at is None:
        raise JobFailed(f"Docker gave {container} no start or exit time ({text!r}); run the figure again.")
    return at


def _states(docker: DockerCli, containers: Mapping[str, str]) -> dict[str, tuple[int, float, float]]:
    """{container: (exit code, started at, finished at)}, from one `docker inspect` of them all."""
    template = "{{.Name}} {{.State.ExitCode}} {{.State.StartedAt}} {{.State.FinishedAt}}"
    states = {}
    for line in docker.run(["inspect", "--format", template, *containers.values()]).splitlines():
        name, code, started, finished = line.split()
        name = name.lstrip("/")
        states[name] = (int(code), _engine_time(started, name), _engine_time(finished, name))
    return states


def run_job(created: Created, spec: JobSpec, workdir: Path) -> JobRun:
    """Create, start, wait for and remove one job's containers; raises JobFailed/DockerError."""
    docker = created.docker
    job_name = f"sagetrain-bench-{secrets.token_hex(3)}"
    trees = workdir / job_name
    network = f"{job_name}-net"
    hosts = [f"algo-{index}" for index in range(1, spec.hosts + 1)]
    containers = {host: f"{job_name}-{host}" for host in hosts}
    try:
        write_trees(spec, job_name, trees)
        created.create_network(network)
        for host in hosts:
            args = [
                "--hostname", host, "--network", network, "--network-alias", host, "--shm-size", "1g",
                "--mount", f"type=bind,source={(trees / host).resolve()},target=/opt/ml",
            ]  # fmt: skip
            if spec.entrypoint is not None:
                args += ["--entrypoint", spec.entrypoint]
            for key, value in spec.env.items():
                args += ["--env", f"{key}={value}"]
            for target, source in spec.files.items():
                args += ["--mount", f"type=bind,source={source.resolve()},target={target},readonly"]
            for target, source in spec.shared.items():
                args += ["--mount", f"type=bind,source={source.resolve()},target={target}"]
            created.create_container(containers[host], [*args, spec.image, *spec.command])
        issued = time.time()  # Docker's part of a start begins here (it starts them one by one)
        docker.run(["start", *containers.values()])
        activity = f"the {spec.hosts} container(s) of {spec.image} to exit"
        end = Deadline(spec.timeout_seconds, activity, "raise the figure's timeout_seconds")
        try:
            docker.run(["wait", *containers.values()], end)
        except DockerError as error:
            tails = "\n".join(
                HostRun(host, -1, 0, 0, _read_log(docker, name)).tail() for host, name in containers.items()
            )
            overran = f"{spec.image}: the job overran {spec.timeout_seconds:g} s"
            raise JobFailed(f"{overran}; last lines:\n{tails}") from error
        states = _states(docker, containers)
        runs = [HostRun(host, *states[name], _read_log(docker, name)) for host, name in containers.items()]
        return JobRun(spec.image, tuple(runs), issued)
    finally:
        created.remove_containers(list(containers.values()))
        created.remove_network(network)
        shutil.rmtree(trees, ignore_errors=True)
