"""The SageMaker Python SDK's local mode, run for real against the image: the SDK (v2 `sagemaker`, pinned
in container/pins/test-tools.txt, or v3 `sagemaker-train`, pinned in container/pins/python.txt) installed
in a virtualenv of its own, and a job script run by it that writes each host's /opt/ml, starts the hosts
with `docker compose` and collects their model and output, as for a user.

No AWS account and no network beyond the local Docker engine: dummy credentials, a region, the SDK's
telemetry opted out, and the SDK run in a network namespace of its own (`unshare --net`), where only the
Docker socket (a file) reaches anything. Both SDKs' compose files put the hosts on a network named
`sagemaker-local`; `local_mode_project` creates it `--internal`, with the labels by which compose takes
it as its own, so compose uses it instead of creating a routed one. One that an earlier local-mode job
left (compose creates it and never removes it) is replaced when no running container uses it.

Which Compose each SDK runs, and whether that is Compose v2, is scripts/ensure-compose.sh's to judge:
the tests ask it (`--check`), so the script and the tests cannot disagree about what is enough.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pytest
import sdk_v3_package
from cluster import assert_identical_weights
from conftest import TEST_LABEL
from localcluster.dockercli import DockerCli

REPO = Path(__file__).resolve().parents[2]
PYTHON_PINS = REPO / "container" / "pins" / "python.txt"  # pip constraints
TEST_TOOL_PINS = REPO / "container" / "pins" / "test-tools.txt"
# One virtualenv per SDK (both install the package `sagemaker`), out of the test environment's way.
SDK_VENVS = Path(os.environ.get("SAGETRAIN_SDK_VENVS", REPO / ".venv-sdk"))
INSTALL_SECONDS = 900
ENSURE_COMPOSE = REPO / "scripts" / "ensure-compose.sh"
# The network both SDKs' local mode names in its compose file.
SDK_NETWORK = "sagemaker-local"
SDK_CONFIG = """SchemaVersion: '1.0'
SageMaker:
  PythonSDK:
    Modules:
      TelemetryOptOut: true
"""


@dataclass(frozen=True)
class Sdk:
    package: str
    probe: str  # a module that imports only when the SDK is installed whole

    @property
    def version(self) -> str:
        """As test-tools.txt pins it, else as python.txt does."""
        for path, pattern in ((TEST_TOOL_PINS, r"^pypi +{} +(\S+)"), (PYTHON_PINS, r"^{}==(\S+)")):
            found = re.search(pattern.format(re.escape(self.package)), path.read_text(), re.MULTILINE)
            if found:
                return found.group(1)
        raise LookupError(f"{self.package} is pinned in neither {TEST_TOOL_PINS.name} nor {PYTHON_PINS.name}")


SDK_V2 = Sdk("sagemaker", "sagemaker.local")
SDK_V3 = Sdk(sdk_v3_package.PACKAGE, "sagemaker.train.model_trainer")


def sdk_python(sdk: Sdk) -> Path:
    """The interpreter of the SDK's own virtualenv, with the pinned SDK installed (once). pytest-xdist's
    workers each ask for it: one installs while the others wait on the virtualenv's lock."""
    SDK_VENVS.mkdir(parents=True, exist_ok=True)
    with (SDK_VENVS / f"{sdk.package}.lock").open("w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        return _installed_sdk_python(sdk)


def _installed_sdk_python(sdk: Sdk) -> Path:
    venv = SDK_VENVS / sdk.package
    python = venv / "bin" / "python"
    check = (
        f"import importlib.metadata as m, {sdk.probe}; assert m.version('{sdk.package}') == '{sdk.version}'"
    )
    if (
        python.exists()
        and subprocess.run([str(python), "-c", check], capture_output=True, timeout=120).returncode == 0
    ):
        return python
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "-c", str(PYTHON_PINS), f"{sdk.package}=={sdk.version}"],
    ]  # fmt: skip
    for step in steps:
        completed = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_SECONDS, check=False)
        if completed.returncode != 0:
            pytest.fail(f"could not install {sdk.package} into {venv}: {completed.stderr.strip()[-800:]}")
    return python


class NetworkStep(Enum):
    """What `local_mode_project` does about the Docker networks named sagemaker-local it finds before
    creating its own:

    none found ──> CREATE
    found, no container on it in a running state ──> REPLACE (removed, saying so in one line; CREATE)
    found, a container on it in a running state ──> REFUSE (the test fails, saying what to do)
    """

    CREATE = "create"
    REPLACE = "replace"
    REFUSE = "refuse"


# `docker ps` states of a container that holds no network endpoint: it neither uses the network nor
# stops its removal (Docker keeps the stopped container's setting, which names the network).
IDLE_STATES = frozenset({"created", "exited", "dead"})


def in_use(network: str) -> str:
    """The failure when a running container uses the network."""
    return (
        f"a Docker network named {network} exists already (another local-mode job or test run?); "
        "remove it once nothing uses it, then rerun"
    )


def network_step(networks: Sequence[str], attached: Mapping[str, str]) -> NetworkStep:
    """The step for the networks found by the name (their ids) and the containers attached to one
    (name -> `docker ps` state)."""
    if not networks:
        return NetworkStep.CREATE
    if all(state in IDLE_STATES for state in attached.values()):
        return NetworkStep.REPLACE
    return NetworkStep.REFUSE


def replacing_line(network: str, labels: Mapping[str, str], attached: Mapping[str, str]) -> str:
    """The one line that says a left-behind network is replaced, and whose it was (its labels)."""
    project = labels.get("com.docker.compose.project")
    owner = f"by compose project {project}" if project else "(not by compose)"
    containers = ", ".join(f"{name} {state}" for name, state in sorted(attached.items())) or "none"
    return (
        f"replacing the Docker network {network} left behind {owner}: no running container uses it "
        f"(containers on it: {containers})"
    )


def assert_compose_v2() -> None:
    """Both SDKs will run Compose v2, as scripts/ensure-compose.sh judges it."""
    completed = subprocess.run(
        [str(ENSURE_COMPOSE), "--check"], capture_output=True, text=True, timeout=120, check=False
    )
    if completed.returncode != 0:
        pytest.fail(
            f"{completed.stderr.strip()}; scripts/ensure-compose.sh installs Compose v2 (or says what is "
            "in the way)"
        )


def clear_sdk_network(docker: DockerCli, network: str = SDK_NETWORK) -> None:
    """No network by that name afterwards, or the test fails: a left-behind one that no running container
    uses is removed, saying so in one line (a warning in pytest's summary)."""
    networks = docker.run(["network", "ls", "--quiet", "--filter", f"name=^{network}$"]).split()
    listing = docker.run(
        ["ps", "--all", "--filter", f"network={network}", "--format", "{{.Names}}\t{{.State}}"]
    )
    attached = {name: state for name, _, state in (line.partition("\t") for line in listing.splitlines())}
    step = network_step(networks, attached)
    if step is NetworkStep.REFUSE:
        pytest.fail(in_use(network))
    if step is NetworkStep.REPLACE:
        labels = json.loads(docker.run(["network", "inspect", "--format", "{{json .Labels}}", networks[0]]))
        warnings.warn(replacing_line(network, labels or {}, attached), stacklevel=2)
        removed = docker.call(["network", "rm", *networks])
        if removed.returncode != 0:  # a container started on it meanwhile
            pytest.fail(f"{in_use(network)} ({removed.stderr.strip()})")


@contextmanager
def local_mode_project(docker: DockerCli) -> Iterator[str]:
    """A compose project name, with the internal `sagemaker-local` network made for it; afterwards the
    project's containers (compose leaves them, stopped) and the network are removed."""
    assert_compose_v2()
    clear_sdk_network(docker)
    project = f"sagetrain-test-sdk-{uuid.uuid4().hex[:8]}"
    network = docker.run(
        ["network", "create", "--driver", "bridge", "--internal", "--label", f"{TEST_LABEL}=1",
         "--label", f"com.docker.compose.network={SDK_NETWORK}",
         "--label", f"com.docker.compose.project={project}", SDK_NETWORK]
    ).strip()  # fmt: skip
    try:
        yield project
    finally:
        label = f"label=com.docker.compose.project={project}"
        containers = docker.run(["ps", "--all", "--quiet", "--filter", label]).split()
        if containers:
            docker.run(["rm", "--force", *containers], check=False)
        docker.run(["network", "rm", network], check=False)


@dataclass(frozen=True)
class SdkRun:
    exit_code: int
    output: str

    def describe(self) -> str:
        return f"the SDK's job script exited {self.exit_code}; its output, last part:\n{self.output[-8000:]}"


def run_sdk_job(python: Path, script: Path, job: dict, project: str, workdir: Path, seconds: float) -> SdkRun:
    """``python script '<job as JSON>'`` in a network namespace of its own, as the compose project."""
    config = workdir / "sagemaker-config.yaml"
    config.write_text(SDK_CONFIG)
    home = workdir / "home"
    home.mkdir()
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "AWS_ACCESS_KEY_ID": "AKIDLOCALMODETEST",
        "AWS_SECRET_ACCESS_KEY": "local-mode-test-not-a-secret",
        "AWS_DEFAULT_REGION": "us-west-2",
        "SAGEMAKER_USER_CONFIG_OVERRIDE": str(config),
        "COMPOSE_PROJECT_NAME": project,
    }
    command = ["unshare", "--net", str(python), str(script), json.dumps(job)]
    try:
        completed = subprocess.run(
            command, env=environ, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=seconds, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"the SDK's job did not end within {seconds:.0f} s; its output:\n{expired.output}")
    return SdkRun(completed.returncode, completed.stdout)


def assert_ranks_spread_with_identical_weights(output_data: Path, hosts: int, per_host: int) -> list[str]:
    """The ranks' identity files and final weights (tests/container/cases/hvd_script) in the job's merged
    output data: every rank once, ``per_host`` ranks on each of ``hosts`` hosts in host order, identical
    weights. Returns the hosts of the ranks, in rank order."""
    files = output_data.glob("identity-rank-*.json")
    identities = sorted((json.loads(path.read_text()) for path in files), key=lambda i: i["rank"])
    size = per_host * hosts
    assert [(i["rank"], i["size"]) for i in identities] == [(rank, size) for rank in range(size)], identities
    by_rank = [i["sm_current_host"] for i in identities]
    distinct = sorted(set(by_rank))
    assert len(distinct) == hosts and by_rank == [distinct[rank // per_host] for rank in range(size)], by_rank
    weights = sorted(output_data.glob("rank-*-weights.npz"))
    assert len(weights) == size, weights
    assert_identical_weights(weights)
    return by_rank
