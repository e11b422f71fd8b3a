"""scripts/ensure-compose.sh --check: whether each SageMaker SDK's local mode would run Compose v2, judged
from what `docker compose version` and the first `docker-compose` on PATH print. The Docker CLI and the
Composes are small stand-ins printing what the real ones print (Debian bookworm's Compose v1 1.29.2,
Debian trixie's Compose v2 2.26.1, Docker's own v2 build), on a PATH of their own, so the machine's
Composes are neither seen nor touched."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure-compose.sh"
BASH = shutil.which("bash") or "/bin/bash"
TOOLS = ("sed", "head")  # what the check runs besides docker and docker-compose

# `docker compose version` of Debian's build and of Docker's own build.
DEBIAN_PLUGIN = "Docker Compose version 2.26.1-4"
DOCKER_PLUGIN = "Docker Compose version v2.29.7"
# `docker-compose version --short`.
COMPOSE_V1 = "1.29.2"
COMPOSE_V2 = "2.26.1-4"


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def fake_docker(folder: Path, compose_version: str | None) -> None:
    """A docker CLI whose `compose version` prints that line, or that has no compose plugin."""
    plugin = f"  echo '{compose_version}'; exit 0\n" if compose_version else ""
    executable(
        folder / "docker",
        '#!/bin/sh\nif [ "$1 $2" = "compose version" ]; then\n'
        + plugin
        + '  echo "docker: unknown command: docker $1" >&2; exit 1\nfi\nexit 1\n',
    )


def fake_docker_compose(folder: Path, short_version: str) -> Path:
    """A standalone docker-compose whose `version --short` prints that version."""
    path = folder / "docker-compose"
    executable(path, f'#!/bin/sh\n[ "$1 $2" = "version --short" ] && echo {short_version}\n')
    return path


@pytest.fixture
def tools(tmp_path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is None:
            pytest.fail(f"{tool} is not on PATH")
        (folder / tool).symlink_to(found)
    return folder


def check(tools: Path, *folders: Path) -> subprocess.CompletedProcess[str]:
    """`ensure-compose.sh --check` with PATH = the folders (first first), then the tools."""
    return subprocess.run(
        [BASH, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.pathsep.join(str(folder) for folder in (*folders, tools)), "HOME": str(tools)},
        check=False,
    )


def test_compose_v1_alone_is_not_enough(tools, tmp_path):
    # Debian bookworm after `apt-get install docker-compose`: no plugin, docker-compose 1.29.2.
    fake_docker(tmp_path / "bin", None)
    fake_docker_compose(tmp_path / "bin", COMPOSE_V1)
    result = check(tools, tmp_path / "bin")
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["ensure-compose: 'docker compose' (Compose v2) is missing"]


def test_debian_plugin_with_compose_v1_first_on_path_is_not_enough(tools, tmp_path):
    # Debian's v2 prints no "v2", so SDK v2 runs the first docker-compose on PATH: here v1.
    fake_docker(tmp_path / "bin", DEBIAN_PLUGIN)
    v1 = fake_docker_compose(tmp_path / "usr-bin", COMPOSE_V1)
    fake_docker_compose(tmp_path / "usr-local-bin", COMPOSE_V2)
    result = check(tools, tmp_path / "bin", tmp_path / "usr-bin", tmp_path / "usr-local-bin")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "ensure-compose: 'docker compose version' does not say \"v2\" (Docker Compose version 2.26.1-4), so "
        f"SDK v2 local mode runs the first 'docker-compose' on PATH, {v1}, which is Compose 1.29.2"
    ]


def test_debian_plugin_with_compose_v2_ahead_of_compose_v1_is_enough(tools, tmp_path):
    # What ensure-compose.sh sets up beside Debian's v1: /usr/local/bin/docker-compose before /usr/bin.
    fake_docker(tmp_path / "bin", DEBIAN_PLUGIN)
    fake_docker_compose(tmp_path / "usr-local-bin", COMPOSE_V2)
    fake_docker_compose(tmp_path / "usr-bin", COMPOSE_V1)
    result = check(tools, tmp_path / "bin", tmp_path / "usr-local-bin", tmp_path / "usr-bin")
    assert (result.returncode, result.stderr) == (0, "")


def test_debian_plugin_without_docker_compose_is_not_enough(tools, tmp_path):
    fake_docker(tmp_path / "bin", DEBIAN_PLUGIN)
    result = check(tools, tmp_path / "bin")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "ensure-compose: 'docker compose version' does not say \"v2\" (Docker Compose version 2.26.1-4), so "
        "SDK v2 local mode runs 'docker-compose', and there is none on PATH"
    ]


def test_a_plugin_that_says_v2_is_enough_whatever_docker_compose_is(tools, tmp_path):
    # Both SDKs then run `docker compose`; the user's Compose v1 stays as it is, unused.
    fake_docker(tmp_path / "bin", DOCKER_PLUGIN)
    fake_docker_compose(tmp_path / "usr-bin", COMPOSE_V1)
    result = check(tools, tmp_path / "bin", tmp_path / "usr-bin")
    assert (result.returncode, result.stderr) == (0, "")


def test_help_and_bad_arguments():
    shown = subprocess.run(
        [BASH, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert shown.returncode == 0 and shown.stdout.startswith("Usage: scripts/ensure-compose.sh [--check]")
    refused = subprocess.run(
        [BASH, str(SCRIPT), "--bogus"], capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 2 and "unknown argument '--bogus'" in refused.stderr
