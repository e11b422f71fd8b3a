"""Every container and network the benchmarks create, recorded so that one call removes them all, on
every way out (errors, Ctrl-C, SIGTERM): a layer over the repository's one Docker client,
scripts/localcluster/dockercli.py, not a client of its own."""

from __future__ import annotations

from dataclasses import dataclass, field

from localcluster.dockercli import DockerCli, answer_deadline
from sagetrain.deadline import Deadline

LABEL = "sagetrain.benchmark=1"
REMOVE_SECONDS = 60.0  # one `docker rm --force` or `docker network rm`


@dataclass
class Created:
    docker: DockerCli
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)

    def create_network(self, name: str) -> None:
        self.networks.append(name)  # before the call: a half-failed create is still removed
        self.docker.run(["network", "create", "--internal", "--label", LABEL, name])

    def create_container(self, name: str, args: list[str]) -> None:
        self.containers.append(name)
        self.docker.run(["create", "--name", name, "--label", LABEL, *args])

    def run_container(self, name: str, args: list[str], deadline: Deadline) -> str:
        """`docker run` of a helper container to its end; removed afterwards whatever happens."""
        self.containers.append(name)
        try:
            return self.docker.run(["run", "--name", name, *args], deadline)
        finally:
            self.remove_container(name)

    def remove_container(self, name: str) -> None:
        command = ["rm", "--force", "--volumes", name]
        self.docker.run(command, answer_deadline(command, REMOVE_SECONDS), check=False)
        if name in self.containers:
            self.containers.remove(name)

    def remove_containers(self, names: list[str]) -> None:
        """Many at once, in one `docker rm` (a 32-host job's containers, one by one, take seconds)."""
        if not names:
            return
        command = ["rm", "--force", "--volumes", *names]
        self.docker.run(command, answer_deadline(command, REMOVE_SECONDS), check=False)
        self.containers = [name for name in self.containers if name not in names]

    def remove_network(self, name: str) -> None:
        command = ["network", "rm", name]
        self.docker.run(command, answer_deadline(command, REMOVE_SECONDS), check=False)
        if name in self.networks:
            self.networks.remove(name)

    def remove_all(self) -> None:
        for name in list(self.containers):
            self.remove_container(name)
        for name in list(self.networks):
            self.remove_network(name)
