"""Fixtures for tests that drive the real image through the Docker engine.

The CPU image is built once per session with scripts/build.sh: BuildKit's layer cache makes that a
few seconds when nothing changed, and it guarantees the image matches the work tree. When the build was
started in the background (scripts/build.sh --background LOG, as scripts/test.sh and .ci/run do, so the
tiers that need no image run meanwhile), the image fixtures wait for it instead. Environment:
  SAGETRAIN_TEST_IMAGE     image to test (default sagemaker-tf-horovod:cpu)
  SAGETRAIN_IMAGE_NAME     the name scripts/build.sh gives the image (default sagemaker-tf-horovod)
  SAGETRAIN_CPU_BUILD_LOG  the log of a background build of the CPU image: wait for it, do not build
  SAGETRAIN_GPU_BUILD_LOG  the same for the GPU image (tests/container/test_gpu_image.py)
  SAGETRAIN_SKIP_BUILD=1   use the image as it is, without building
  SAGETRAIN_CA_CERTS       extra CA bundle for the build (default: this machine's bundle, if any;
                           empty: none)
"""

import fcntl
import os
import re
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster import DOCKER
from localcluster.dockercli import DockerCli, DockerError, answer_deadline
from sagetrain.deadline import Deadline

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGE_NAME = os.environ.get("SAGETRAIN_IMAGE_NAME", "sagemaker-tf-horovod")
DEFAULT_IMAGE = f"{IMAGE_NAME}:cpu"
SYSTEM_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_DEADLINE_S = 90 * 60
# The last line of a background build's log (scripts/build.sh --background).
BUILD_EXIT_LINE = re.compile(r"build\.sh: exit (\d+)")
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


def background_build_log(variant: str) -> Path | None:
    """The log of the background build of ``variant`` ("cpu", "gpu") the caller started, if it did."""
    value = os.environ.get(f"SAGETRAIN_{variant.upper()}_BUILD_LOG")
    return Path(value) if value else None


def background_build_ended(log: Path, seconds: float) -> bool:
    """Whether the build that holds ``log`` locked (scripts/build.sh --background) has ended, waiting up
    to ``seconds`` for it: a shared lock on the log is granted once the build's processes are gone."""
    with log.open("rb") as handle:
        ended = threading.Event()

        def take_shared_lock() -> None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
            ended.set()

        threading.Thread(target=take_shared_lock, name=f"wait-for-{log.name}", daemon=True).start()
        return ended.wait(seconds)


def wait_for_background_build(log: Path, variant: str) -> None:
    """Wait for the background build of ``variant`` to end, then fail with its log's tail unless its last
    line says it succeeded."""
    if not log.is_file():
        pytest.fail(f"{log} does not exist: no background build of the {variant} image writes there")
    activity = f"the background build of the {variant} image (output: {log})"
    deadline = Deadline(BUILD_DEADLINE_S, activity, "see that output")
    if not background_build_ended(log, deadline.remaining()):
        pytest.fail(deadline.timeout_message())
    lines = log.read_text(errors="replace").splitlines()
    last = BUILD_EXIT_LINE.fullmatch(lines[-1]) if lines else None
    if last is None or last.group(1) != "0":
        outcome = f"exited {last.group(1)}" if last else "ended without its exit line"
        tail = "\n".join(lines[-40:])
        pytest.fail(f"the background build of the {variant} image {outcome}; {log}:\n{tail}")


# The image fixtures of the tests that use them, and the variant each names.
IMAGE_FIXTURES = {"cpu_image": "cpu", "gpu_image": "gpu"}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """A test of an image whose build still runs in the background waits for it here, before its own time
    limit starts (pytest-timeout's starts inside this hook); its image fixture then finds the build ended
    and says whether it succeeded."""
    for fixture, variant in IMAGE_FIXTURES.items():
        log = background_build_log(variant)
        if log is not None and log.is_file() and fixture in getattr(item, "fixturenames", ()):
            background_build_ended(log, BUILD_DEADLINE_S)
    return (yield)


@pytest.fixture(scope="session")
def cpu_image(docker_client: DockerCli, tmp_path_factory: pytest.TempPathFactory) -> str:
    image = os.environ.get("SAGETRAIN_TEST_IMAGE", DEFAULT_IMAGE)
    build_log = background_build_log("cpu")
    if build_log is not None:
        wait_for_background_build(build_log, "cpu")
    elif os.environ.get("SAGETRAIN_SKIP_BUILD", "0") != "1":
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
