"""Fixtures for tests that drive the real image through the Docker engine.

The CPU image is built once per session with scripts/build.sh: BuildKit's layer cache makes that a
few seconds when nothing changed, and it guarantees the image matches the work tree. Environment:
  SAGETRAIN_TEST_IMAGE     image to test (default sagemaker-tf-horovod:cpu)
  SAGETRAIN_SKIP_BUILD=1   use that image as it is, without building (as scripts/test.sh)
  SAGETRAIN_CA_CERTS       extra CA bundle for the build (default: this machine's bundle, if any;
                           empty: none)
"""

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster import DOCKER
from localcluster.dockercli import DockerCli, DockerError, answer_deadline
from sagetrain.deadline import Deadline

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_IMAGE = "sagemaker-tf-horovod:cpu"
SYSTEM_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_DEADLINE_S = 90 * 60
TEST_LABEL = "sagetrain.test"
ENGINE_ANSWER_S = 30.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.container)


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    output: str


@pytest.fixture(scope="session")
def docker_client() -> DockerCli:
    version = ["version", "--format", "{{.Server.Version}}"]
    try:
        DOCKER.run(version, answer_deadline(version, ENGINE_ANSWER_S))
    except DockerError as error:
        pytest.fail(f"the Docker engine is not reachable ({error}); start it (scripts/ensure-docker.sh)")
    return DOCKER


def build_ca_certs() -> str | None:
    configured = os.environ.get("SAGETRAIN_CA_CERTS")
    if configured is not None:
        return configured or None
    return str(SYSTEM_CA_BUNDLE) if SYSTEM_CA_BUNDLE.is_file() else None


@pytest.fixture(scope="session")
def cpu_image(docker_client: DockerCli, tmp_path_factory: pytest.TempPathFactory) -> str:
    image = os.environ.get("SAGETRAIN_TEST_IMAGE", DEFAULT_IMAGE)
    if os.environ.get("SAGETRAIN_SKIP_BUILD", "0") != "1":
        command = [str(REPO_ROOT / "scripts" / "build.sh"), "cpu"]
        if image != DEFAULT_IMAGE:
            command += ["--tag", image]
        ca_certs = build_ca_certs()
        if ca_certs:
            command += ["--ca-certs", ca_certs]
        log_path = tmp_path_factory.mktemp("build") / "build.log"
        with log_path.open("w") as log:
            completed = subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, timeout=BUILD_DEADLINE_S, check=False
            )
        if completed.returncode != 0:
            tail = "\n".join(log_path.read_text().splitlines()[-40:])
            pytest.fail(f"scripts/build.sh cpu failed (exit {completed.returncode}); log {log_path}:\n{tail}")
    if docker_client.image_id(image) is None:
        pytest.fail(f"image {image} does not exist; build it with scripts/build.sh cpu")
    return image


def run_in_image(
    client: DockerCli,
    image: str,
    command: list[str] | None,
    *,
    timeout_s: float,
    volumes: dict[str, dict[str, str]] | None = None,
    environment: dict[str, str] | None = None,
    network: str | None = "none",
    hostname: str | None = None,
    entrypoint: list[str] | None = None,
) -> RunResult:
    """Run one container to completion (or kill it at the deadline) and return its exit code and output
    (stdout and stderr, as they came). `volumes` maps a host path to {"bind": path, "mode": "ro"|"rw"};
    `entrypoint` is the program and its first arguments, `command` the rest; `network` None is Docker's
    default bridge."""
    name = f"sagetrain-test-{uuid.uuid4().hex[:12]}"
    args = ["create", "--pull", "never", "--name", name, "--label", f"{TEST_LABEL}=1", "--shm-size", "1g"]
    if network is not None:
        args += ["--network", network]
    if hostname is not None:
        args += ["--hostname", hostname]
    for source, bind in (volumes or {}).items():
        args += ["--volume", f"{source}:{bind['bind']}:{bind.get('mode', 'rw')}"]
    for key, value in (environment or {}).items():
        args += ["--env", f"{key}={value}"]
    if entrypoint:
        args += ["--entrypoint", entrypoint[0]]
    args += [image, *(entrypoint or [])[1:], *(command or [])]
    deadline = Deadline(timeout_s, f"the container of {command} to exit", "raise the test's deadline")
    try:
        client.run(args)
        client.run(["start", name])
        try:
            exit_code = int(client.run(["wait", name], deadline))
        except DockerError as error:
            client.run(["kill", name], check=False)
            output = client.logs(name)
            pytest.fail(
                f"container {command} still running after {timeout_s:.0f}s ({error}); output:\n{output}"
            )
        return RunResult(exit_code, client.logs(name))
    finally:
        client.run(["rm", "--force", name], check=False)


@pytest.fixture
def internal_network(docker_client: DockerCli) -> Iterator[str]:
    """The name of a Docker network with no route off this machine, removed after the test."""
    name = f"sagetrain-test-{uuid.uuid4().hex[:12]}"
    docker_client.run(
        ["network", "create", "--driver", "bridge", "--internal", "--label", f"{TEST_LABEL}=1", name]
    )
    yield name
    docker_client.run(["network", "rm", name])
