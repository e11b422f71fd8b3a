"""The docker CLI, with every container and network the benchmarks create recorded so that one call
removes them all, on every way out (errors, Ctrl-C, SIGTERM)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from datetime import datetime


class DockerError(Exception):
    """A docker command failed or overran its deadline; the message quotes the command."""


def parse_docker_time(text: str) -> float:
    """Docker prints RFC 3339 with nanoseconds (``2024-05-01T10:00:00.123456789Z``); keep microseconds."""
    text = text.strip()
    if "." in text:
        head, fraction = text.split(".", 1)
        digits = fraction.rstrip("Z").split("+")[0].split("-")[0]
        text = f"{head}.{digits[:6].ljust(6, '0')}+00:00"
    else:
        text = text.replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


@dataclass
class Docker:
    executable: str = "docker"
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)

    def run(self, args: list[str], timeout: float = 120, check: bool = True) -> str:
        command = [self.executable, *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as error:
            raise DockerError(f"`{' '.join(command)}` did not finish within {timeout:g} s") from error
        if check and done.returncode != 0:
            raise DockerError(f"`{' '.join(command)}` failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def create_network(self, name: str) -> None:
        self.networks.append(name)
        self.run(["network", "create", "--internal", "--label", "sagetrain.benchmark=1", name])

    def create_container(self, name: str, args: list[str]) -> None:
        self.containers.append(name)  # before the call: a half-failed create is still removed
        self.run(["create", "--name", name, "--label", "sagetrain.benchmark=1", *args])

    def remove_container(self, name: str) -> None:
        self.run(["rm", "--force", "--volumes", name], check=False, timeout=60)
        if name in self.containers:
            self.containers.remove(name)

    def remove_network(self, name: str) -> None:
        self.run(["network", "rm", name], check=False, timeout=60)
        if name in self.networks:
            self.networks.remove(name)

    def remove_all(self) -> None:
        for name in list(self.containers):
            self.remove_container(name)
        for name in list(self.networks):
            self.remove_network(name)

    def image_id(self, image: str) -> str | None:
        output = self.run(["image", "inspect", "--format", "{{.Id}}", image], check=False)
        return output.strip() or None

    def inspect(self, name: str, template: str) -> str:
        return self.run(["inspect", "--format", template, name]).strip()
