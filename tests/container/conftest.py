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

import docker
import pytest
import requests
from docker.models.containers import Container
from docker.models.networks import Network

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_IMAGE = "sagemaker-tf-horovod:cpu"
SYSTEM_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_DEADLINE_S = 90 * 60
TEST_LABEL = "sagetrain.test"


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
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as error:
        pytest.fail(f"the Docker engine is not reachable ({error}); start it (scripts/ensure-docker.sh)")
    yield client
    client.close()


def build_ca_certs() -> str | None:
    configured = os.environ.get("SAGETRAIN_CA_CERTS")
    if configured is not None:
        return configured or None
    return str(SYSTEM_CA_BUNDLE) if SYSTEM_CA_BUNDLE.is_file() else None


@pytest.fixture(scope="session")
def cpu_image(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> str:
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
    try:
        docker_client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {image} does not exist; build it with scripts/build.sh cpu")
    return image


def run_in_image(
    client: docker.DockerClient,
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
    """Run one container to completion (or kill it at the deadline) and return its exit code and output."""
    container: Container = client.containers.create(
        image,
        command,
        name=f"sagetrain-test-{uuid.uuid4().hex[:12]}",
        volumes=volumes or {},
        environment=environment or {},
        network=None if network in (None, "none") else network,
        network_mode="none" if network == "none" else None,
        hostname=hostname,
        entrypoint=entrypoint,
        shm_size="1g",
        labels={TEST_LABEL: "1"},
    )
    try:
        container.start()
        try:
            status = container.wait(timeout=timeout_s)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as error:
            container.kill()
            output = container.logs().decode(errors="replace")
            pytest.fail(
                f"container {command} still running after {timeout_s:.0f}s ({error}); output:\n{output}"
            )
        return RunResult(status["StatusCode"], container.logs().decode(errors="replace"))
    finally:
        container.remove(force=True)


@pytest.fixture
def internal_network(docker_client: docker.DockerClient) -> Iterator[Network]:
    """A Docker network with no route off this machine, removed after the test."""
    network = docker_client.networks.create(
        f"sagetrain-test-{uuid.uuid4().hex[:12]}", driver="bridge", internal=True, labels={TEST_LABEL: "1"}
    )
    yield network
    network.remove()
