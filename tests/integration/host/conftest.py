"""Helpers for host integration tests: a SageMaker /opt/ml tree in a temp folder, and the real entry.

The entry runs as a real process (``python -m sagetrain train``, what the image's ``train`` runs), with
``SAGEMAKER_BASE_DIR`` pointing at the tree and a private ``SAGETRAIN_RUN_DIR``.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from sagetrain.config.channels import Channel
from sagetrain.config.job import load_job_config
from sagetrain.config.job_files import JobFiles
from sagetrain.config.job_secret import Membership, read_job_secret

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "container" / "src"
STOP_GRACE_SECONDS = 10.0
_started: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def stop_leftover_entries():
    """An entry a failed test left running gets SIGTERM, so it stops its own process tree too."""
    yield
    while _started:
        process = _started.pop()
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass
class JobTree:
    root: Path
    run_dir: Path

    @property
    def failure(self) -> Path:
        return self.root / "output" / "failure"

    @property
    def success(self) -> Path:
        return self.root / "output" / "success"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    def write_config(self, name: str, value: object) -> None:
        path = self.root / "input" / "config" / name
        path.write_text(value if isinstance(value, str) else json.dumps(value))

    def host_key(self, host: str) -> bytes:
        """What ``host`` proves membership of this tree's job with, as the entry derives it."""
        config = load_job_config(self.root, check_channels=False)
        return Membership.of_job(config, {}, read_job_secret(config, {})).host_key(host)

    def write_code(self, name: str, text: str) -> Path:
        path = self.root / "code" / name
        path.write_text(text)
        return path

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SAGETRAIN_", "OMPI_", "PMIX_"))
        }
        env.update(
            {
                "SAGEMAKER_BASE_DIR": str(self.root),
                "SAGETRAIN_RUN_DIR": str(self.run_dir),
                "PYTHONPATH": str(SRC),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(extra)
        return env

    def start(self, **extra: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-m", "sagetrain", "train"],
            env=self.env(**extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        _started.append(process)
        return process

    def run(self, **extra: str) -> tuple[int, str]:
        process = self.start(**extra)
        output, _ = process.communicate()
        return process.returncode, output


def make_tree(
    base: Path,
    name: str,
    *,
    hosts: list[str],
    current: str,
    hyperparameters: Mapping[str, object],
    channels: tuple[Channel, ...] = (),
) -> JobTree:
    """``current``'s /opt/ml tree as SageMaker writes it; ``hyperparameters`` as the SDK takes them."""
    root = base / name / "opt" / "ml"
    JobFiles(tuple(hosts), hyperparameters, channels).write(root, current)
    return JobTree(root, base / name / "run")


@pytest.fixture
def job(tmp_path):
    """A one-host job tree (host algo-1-abcde, like SageMaker local mode names hosts)."""

    def build(hyperparameters: Mapping[str, object], **kwargs) -> JobTree:
        kwargs.setdefault("hosts", ["algo-1-abcde"])
        kwargs.setdefault("current", kwargs["hosts"][0])
        return make_tree(tmp_path, kwargs.pop("name", "host"), hyperparameters=hyperparameters, **kwargs)

    return build


def unused_port() -> int:
    """A TCP port free on every IPv4 address now, below the kernel's ephemeral range: a port the kernel
    hands out could meanwhile become a concurrent test's connection's own port, and then a server that
    binds every address (sshd) cannot bind it."""
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    below = range(10_000, first_ephemeral)
    for port in random.sample(below, min(200, len(below))):
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port between 10000 and {first_ephemeral}")


@pytest.fixture
def free_port() -> int:
    return unused_port()
