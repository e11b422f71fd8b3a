"""What local-cluster asks of Docker: the preflight, and the names and argument lists of the job's
network and containers. The client itself is dockercli.py, shared with the benchmarks and the tests."""

from __future__ import annotations

from pathlib import Path

from sagetrain.config.toolkit_env import TRAINING_JOB_NAME_VAR
from sagetrain.deadline import Deadline

from localcluster.dockercli import ENGINE_HINT, DockerCli, DockerError
from localcluster.spec import RunSpec, UsageError

LABEL_JOB = "sagetrain.local-cluster.job"
CONTAINER_ML_ROOT = "/opt/ml"


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
        "--stop-timeout", str(spec.stop_timeout_seconds),
        "--mount", f"type=bind,source={tree.resolve()},target={CONTAINER_ML_ROOT}",
    ]  # fmt: skip
    if spec.checkpoints is not None:
        args += ["--mount", f"type=bind,source={spec.checkpoints.resolve()},target={spec.checkpoint_dir}"]
    if spec.limits.gpus is not None:
        args += ["--gpus", spec.limits.gpus]
    if spec.limits.cpus is not None:
        args += ["--cpus", spec.limits.cpus]
    if spec.limits.memory is not None:
        args += ["--memory", spec.limits.memory]
    if spec.limits.shm_size is not None:
        args += ["--shm-size", spec.limits.shm_size]
    for ulimit in spec.limits.ulimits:
        args += ["--ulimit", ulimit]
    # As SageMaker (and its SDK's local mode) sets it in every container; --env may say otherwise.
    args += ["--env", f"{TRAINING_JOB_NAME_VAR}={spec.job_name}"]
    for key, value in spec.env:
        args += ["--env", f"{key}={value}"]
    args += [spec.image, "train"]
    return args


PREFLIGHT_SECONDS = 60.0  # the whole preflight, four questions an idle engine answers in milliseconds


def preflight(docker: DockerCli, spec: RunSpec) -> None:
    """Before anything is written or created: the engine answers, the image is here (nothing is pulled:
    a pull of a multi-GB image has no place under a command timeout), and no container or network
    already carries this job's names (cleanup removes by name, so it must own every name it uses)."""
    deadline = Deadline(
        PREFLIGHT_SECONDS, "the Docker engine to answer local-cluster's preflight", ENGINE_HINT
    )
    engine = docker.call(["version", "--format", "{{.Server.Version}}"], deadline)
    if engine.returncode != 0:
        detail = (engine.stderr.strip().splitlines() or ["no answer"])[-1]
        raise DockerError(
            f"the Docker engine does not answer ({detail}); start it (scripts/ensure-docker.sh) "
            "and run again."
        )
    if docker.image_id(spec.image, deadline) is None:
        raise UsageError(
            f"--image {spec.image} is not on this machine and local-cluster does not pull; build it "
            f"(scripts/build.sh cpu) or pull it (docker pull {spec.image}), then run again."
        )
    names = [container_name(spec.job_name, host) for host in spec.hosts]
    found = docker.call(["container", "inspect", "--format", "{{.Name}}", *names], deadline)
    taken = [f"container {line.strip().lstrip('/')}" for line in found.stdout.splitlines() if line.strip()]
    network = docker.call(
        ["network", "inspect", "--format", "{{.Name}}", network_name(spec.job_name)], deadline
    )
    if network.returncode == 0:
        taken.append(f"network {network_name(spec.job_name)}")
    if taken:
        raise UsageError(
            f"--job-name {spec.job_name} is already taken by {', '.join(taken)}; choose another "
            "--job-name or remove what takes it (docker rm -f NAME, docker network rm NAME)."
        )
