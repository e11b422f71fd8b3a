"""The docker CLI, the one collaborator with side effects: the wrapper, the preflight, and the names
and argument lists of the job's network and containers."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from localcluster.spec import DockerError, RunSpec, UsageError

LABEL_JOB = "sagetrain.local-cluster.job"
CONTAINER_ML_ROOT = "/opt/ml"
STOP_TIMEOUT_SECONDS = 10  # what SageMaker local mode gives a container between SIGTERM and SIGKILL


def container_name(job_name: str, host: str) -> str:
    return f"{job_name}-{host}"


def network_name(job_name: str) -> str:
    return f"{job_name}-net"


def network_create_args(job_name: str) -> list[str]:
    return ["network", "create", "--internal", "--label", f"{LABEL_JOB}={job_name}", network_name(job_name)]


def container_create_args(spec: RunSpec, host: str, tree: Path) -> list[str]:
    args = [
        "create",
        "--pull", "never",  # preflight found the image; a pull has no place under a command timeout
        "--name", container_name(spec.job_name, host),
        *(("--hostname", host) if spec.hostname_is_host else ()),
        "--network", network_name(spec.job_name),
        "--network-alias", host,
        "--label", f"{LABEL_JOB}={spec.job_name}",
        "--stop-timeout", str(STOP_TIMEOUT_SECONDS),
        "--mount", f"type=bind,source={tree.resolve()},target={CONTAINER_ML_ROOT}",
    ]  # fmt: skip
    if spec.checkpoints is not None:
        target = f"{CONTAINER_ML_ROOT}/checkpoints"
        args += ["--mount", f"type=bind,source={spec.checkpoints.resolve()},target={target}"]
    if spec.limits.gpus is not None:
        args += ["--gpus", spec.limits.gpus]
    if spec.limits.cpus is not None:
        args += ["--cpus", spec.limits.cpus]
    if spec.limits.memory is not None:
        args += ["--memory", spec.limits.memory]
    if spec.limits.shm_size is not None:
        args += ["--shm-size", spec.limits.shm_size]
    for key, value in spec.env:
        args += ["--env", f"{key}={value}"]
    args += [spec.image, "train"]
    return args


def parse_docker_time(text: str) -> float | None:
    """Docker prints RFC 3339 with nanoseconds; datetime takes at most microseconds."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text.strip())
    if match is None or match.group(1).startswith("0001-"):
        return None
    fraction = (match.group(2) or "0")[:6].ljust(6, "0")
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(f"{match.group(1)}.{fraction}{zone}").timestamp()


class DockerCli:
    """The docker CLI. Every way a call can go wrong (no CLI, no answer in time, a refusal) is a
    DockerError whose message is one sentence saying what to do."""

    def __init__(self, executable: str) -> None:
        self.executable = executable

    def _not_runnable(self, error: OSError) -> DockerError:
        return DockerError(
            f"the docker CLI {self.executable!r} could not be run ({error.strerror or error}); "
            "install Docker or pass --docker with the path of its CLI."
        )

    def call(self, args: Sequence[str], timeout: float | None = 120) -> subprocess.CompletedProcess:
        """Run one docker command; its exit status is the caller's to judge."""
        try:
            # A new session keeps the terminal's Ctrl-C away from the CLI: this tool decides what stops.
            return subprocess.run(
                [self.executable, *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                start_new_session=True,
            )
        except OSError as error:
            raise self._not_runnable(error) from None
        except subprocess.TimeoutExpired:
            raise DockerError(
                f"`docker {' '.join(args[:2])}` did not finish within {timeout:g} s; check that the "
                "Docker engine answers (`docker info`) and run again."
            ) from None

    def run(self, args: Sequence[str], check: bool = True, timeout: float | None = 120) -> str:
        completed = self.call(args, timeout)
        if check and completed.returncode != 0:
            raise DockerError(f"`docker {' '.join(args[:2])}` failed: {completed.stderr.strip()}")
        return completed.stdout.strip()

    def popen(self, args: Sequence[str]) -> subprocess.Popen:
        try:
            return subprocess.Popen(
                [self.executable, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as error:
            raise self._not_runnable(error) from None


PREFLIGHT_TIMEOUT_SECONDS = 30


def preflight(docker: DockerCli, spec: RunSpec) -> None:
    """Before anything is written or created: the engine answers, the image is here (nothing is pulled:
    a pull of a multi-GB image has no place under a command timeout), and no container or network
    already carries this job's names (cleanup removes by name, so it must own every name it uses)."""
    engine = docker.call(["version", "--format", "{{.Server.Version}}"], PREFLIGHT_TIMEOUT_SECONDS)
    if engine.returncode != 0:
        detail = (engine.stderr.strip().splitlines() or ["no answer"])[-1]
        raise DockerError(
            f"the Docker engine does not answer ({detail}); start it (scripts/ensure-docker.sh) "
            "and run again."
        )
    image = docker.call(["image", "inspect", "--format", "{{.Id}}", spec.image], PREFLIGHT_TIMEOUT_SECONDS)
    if image.returncode != 0:
        raise UsageError(
            f"--image {spec.image} is not on this machine and local-cluster does not pull; build it "
            f"(scripts/build.sh cpu) or pull it (docker pull {spec.image}), then run again."
        )
    names = [container_name(spec.job_name, host) for host in spec.hosts]
    found = docker.call(["container", "inspect", "--format", "{{.Name}}", *names], PREFLIGHT_TIMEOUT_SECONDS)
    taken = [f"container {line.strip().lstrip('/')}" for line in found.stdout.splitlines() if line.strip()]
    network = docker.call(
        ["network", "inspect", "--format", "{{.Name}}", network_name(spec.job_name)],
        PREFLIGHT_TIMEOUT_SECONDS,
    )
    if network.returncode == 0:
        taken.append(f"network {network_name(spec.job_name)}")
    if taken:
        raise UsageError(
            f"--job-name {spec.job_name} is already taken by {', '.join(taken)}; choose another "
            "--job-name or remove what takes it (docker rm -f NAME, docker network rm NAME)."
        )
