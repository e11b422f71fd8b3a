"""What the SDK local-mode tests do about a network named like the SDKs' `sagemaker-local` that is there
before them (sdk_local_mode.py): the rule as a pure function with literals, then the real thing against
the Docker engine, on a network of a name of its own so that no real local-mode job is disturbed: one
left behind as compose leaves it (a routed bridge with compose's labels, a stopped container on it) is
replaced, saying so in one line; one that a running container uses stops the test, as before."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from conftest import TEST_LABEL
from localcluster.dockercli import DockerCli
from sdk_local_mode import NetworkStep, clear_sdk_network, in_use, network_step, replacing_line


@pytest.mark.parametrize(
    ("networks", "attached", "step"),
    [
        ([], {}, NetworkStep.CREATE),
        ([], {"old-algo-1-1": "exited"}, NetworkStep.CREATE),  # a stopped container names a removed one
        (["4f1c"], {}, NetworkStep.REPLACE),
        (["4f1c"], {"old-algo-1-1": "exited", "old-algo-2-1": "created", "x": "dead"}, NetworkStep.REPLACE),
        (["4f1c"], {"old-algo-1-1": "exited", "job-algo-2-1": "running"}, NetworkStep.REFUSE),
        (["4f1c"], {"job-algo-1-1": "paused"}, NetworkStep.REFUSE),
        (["4f1c"], {"job-algo-1-1": "restarting"}, NetworkStep.REFUSE),
        (["4f1c", "9e0a"], {"old-algo-1-1": "exited"}, NetworkStep.REPLACE),
    ],
)
def test_the_rule(networks, attached, step):
    assert network_step(networks, attached) is step


def test_the_line_names_the_compose_project_and_the_containers_on_the_network():
    labels = {"com.docker.compose.network": "sagemaker-local", "com.docker.compose.project": "tmp3x9"}
    line = replacing_line(
        "sagemaker-local", labels, {"tmp3x9-algo-2-1": "exited", "tmp3x9-algo-1-1": "exited"}
    )
    assert line == (
        "replacing the Docker network sagemaker-local left behind by compose project tmp3x9: no running "
        "container uses it (containers on it: tmp3x9-algo-1-1 exited, tmp3x9-algo-2-1 exited)"
    )
    assert replacing_line("sagemaker-local", {}, {}) == (
        "replacing the Docker network sagemaker-local left behind (not by compose): no running container "
        "uses it (containers on it: none)"
    )


@pytest.fixture
def left_network(docker_client: DockerCli) -> Iterator[str]:
    """A network as compose leaves it (an ordinary bridge with its labels), under a name of the test's."""
    name = f"sagetrain-test-left-{uuid.uuid4().hex[:8]}"
    docker_client.run(
        ["network", "create", "--driver", "bridge", "--label", f"{TEST_LABEL}=1",
         "--label", f"com.docker.compose.network={name}",
         "--label", "com.docker.compose.project=tmpleft", name]
    )  # fmt: skip
    try:
        yield name
    finally:
        containers = docker_client.run(["ps", "--all", "--quiet", "--filter", f"label={TEST_LABEL}={name}"])
        if containers:
            docker_client.run(["rm", "--force", *containers.split()], check=False)
        docker_client.run(["network", "rm", name], check=False)


def container_on(docker: DockerCli, image: str, network: str, *, running: bool) -> str:
    """A container of the test on the network: running (sleeping) or stopped (created, never started)."""
    name = f"{network}-algo-1-1"
    command = ["run", "--detach"] if running else ["create"]
    docker.run(
        [*command, "--name", name, "--label", f"{TEST_LABEL}={network}", "--network", network,
         "--entrypoint", "sleep", image, "infinity"]
    )  # fmt: skip
    return name


def network_ids(docker: DockerCli, network: str) -> list[str]:
    return docker.run(["network", "ls", "--quiet", "--filter", f"name=^{network}$"]).split()


def test_a_left_network_with_a_stopped_container_is_replaced_saying_so(
    docker_client, cpu_image, left_network
):
    stopped = container_on(docker_client, cpu_image, left_network, running=False)
    with pytest.warns(UserWarning) as said:
        clear_sdk_network(docker_client, left_network)
    assert [str(warning.message) for warning in said] == [
        f"replacing the Docker network {left_network} left behind by compose project tmpleft: no running "
        f"container uses it (containers on it: {stopped} created)"
    ]
    assert network_ids(docker_client, left_network) == []
    # The stopped container is not the tests' to remove; it stays.
    assert docker_client.run(["inspect", "--format", "{{.State.Status}}", stopped]) == "created"


def test_a_network_a_running_container_uses_stops_the_test(docker_client, cpu_image, left_network):
    container_on(docker_client, cpu_image, left_network, running=True)
    before = network_ids(docker_client, left_network)
    with pytest.raises(pytest.fail.Exception) as failed:
        clear_sdk_network(docker_client, left_network)
    assert str(failed.value) == in_use(left_network)
    assert network_ids(docker_client, left_network) == before
