"""The comparison image with AWS's TensorFlow training toolkit, built FROM our image and kept tagged for
reuse; rebuilt when our image changes (the build records our image's id in a label)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from benchlib.docker import Docker, DockerError

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "benchmarks" / "aws-toolkit.Dockerfile"
BASE_LABEL = "sagetrain.benchmark.base"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_CLIENT = "/usr/bin/docker"  # Debian's classic client: the only one here with built-in BuildKit
OTHER_BUILD_WAIT_SECONDS = 45 * 60


def say(text: str) -> None:
    print(f"benchmarks: {text}", flush=True)


def other_docker_builds() -> list[str]:
    done = subprocess.run(["pgrep", "-af", "docker build"], capture_output=True, text=True, check=False)
    return [line for line in done.stdout.splitlines() if line and "pgrep" not in line]


def wait_for_other_builds() -> None:
    """Two image builds at once would starve a 2-core machine and skew every figure."""
    deadline = time.monotonic() + OTHER_BUILD_WAIT_SECONDS
    pause = threading.Event()
    announced = False
    while running := other_docker_builds():
        if time.monotonic() > deadline:
            raise DockerError(
                f"another docker build is still running after {OTHER_BUILD_WAIT_SECONDS // 60} min "
                f"({running[0]}); rerun when it has finished."
            )
        if not announced:
            say(f"waiting for another docker build to finish before building: {running[0]}")
            announced = True
        pause.wait(5)


def ensure_aws_image(docker: Docker, base: str, tag: str, rebuild: bool) -> str:
    base_id = docker.image_id(base)
    if base_id is None:
        raise DockerError(f"image {base} does not exist; build it first: scripts/build.sh cpu")
    if not rebuild and docker.image_id(tag) is not None:
        label = f'{{{{index .Config.Labels "{BASE_LABEL}"}}}}'
        built_from = docker.run(["image", "inspect", "--format", label, tag])
        if built_from.strip() == base_id:
            return tag
        say(f"{tag} was built from an older {base}: rebuilding it")
    wait_for_other_builds()
    say(f"building the comparison image {tag} FROM {base} (AWS's sagemaker-tensorflow-training toolkit)")
    command = [
        BUILD_CLIENT, "build", "--network", "host", "-f", str(DOCKERFILE),
        "--build-arg", f"BASE_IMAGE={base}", "--label", f"{BASE_LABEL}={base_id}", "-t", tag,
    ]  # fmt: skip
    if CA_BUNDLE.is_file():
        command += ["--secret", f"id=extra_ca_certs,src={CA_BUNDLE}"]
    command.append(str(REPO / "container"))
    done = subprocess.run(
        command, env={**os.environ, "DOCKER_BUILDKIT": "1"}, capture_output=True, text=True, timeout=1800,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
        raise DockerError(f"building {tag} failed ({done.returncode}):\n{tail}")
    return tag


def toolkit_version(docker: Docker, tag: str) -> str:
    output = docker.run(
        ["run", "--rm", "--network", "none", "--entrypoint", "/opt/venv/bin/pip", tag,
         "show", "sagemaker-tensorflow-training"],
    )  # fmt: skip
    versions = [line.split(":", 1)[1].strip() for line in output.splitlines() if line.startswith("Version:")]
    return versions[0] if versions else "?"
