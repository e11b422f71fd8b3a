"""Figure 15: a 2-host job's start while an outsider crowds the master's coordinator, against the same job
alone. Targets: the job starts within 2x its time alone, and the master uses at most 25 % of a CPU before
its worker joins.

Each run is an MPI job of our image (payload/mpi_probe.py, one rank per host) whose worker container is
started only once the master waits for it. In the crowded run, a container of our image on the job's
network (payload/coordinator_crowd.py, with CAP_NET_ADMIN) first takes 23 addresses of the network's own
(its highest, which Docker gives no container before the lower ones), holds 32 silent connections to the
coordinator from each of 20 of them and sends malformed SPAKE2 starts (a wrong side byte) from the other
3, one connection after another; the worker starts once every address has connected. Measured: the
worker's start (Docker's StartedAt) to every rank's first line (the job started), and to its join (the
time Docker logged its "joined" line); and the master container's CPU time (its cgroup's) from the
crowd's readiness (alone: from the master's wait) to the worker's join, as a share of one CPU. The crowd
and the job share this machine's CPUs, as they would not on SageMaker.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import shutil
import time
from dataclasses import dataclass

from benchlib.cluster import JobFailed, JobSpec, write_trees
from benchlib.context import PAYLOAD, Context, alternating
from benchlib.report import NO_TARGET, Row, Target, TargetKind
from localcluster.dockercli import DockerCli, parse_docker_time
from sagetrain.deadline import Deadline

NUMBER = 15
TITLE = "a 2-host job's start with 23 outsider addresses crowding the coordinator, vs alone"
HOSTS = ("algo-1", "algo-2")
SILENT_ADDRESSES, CONNECTIONS_PER_ADDRESS, MALFORMED_ADDRESSES = 20, 32, 3
COORDINATOR_PORT = 7077  # the image's default sagetrain_coordinator_port
JOB_SECONDS = 300.0
WAITING, JOINED, READY = "waiting for algo-2 to join", "joined master host algo-1", "CROWD READY"
CPU_USAGE = "cat /sys/fs/cgroup/cpu.stat 2>/dev/null || cat /sys/fs/cgroup/cpuacct/cpuacct.usage"
SPEC_HYPERPARAMETERS = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 1}


@dataclass(frozen=True)
class Start:
    start_seconds: float  # the worker's StartedAt -> every rank's first line
    join_seconds: float  # the worker's StartedAt -> its "joined" line
    master_cpu_share: float  # of one CPU, from the crowd's readiness (alone: the master's wait) to the join


def logged_at(docker: DockerCli, container: str, marker: str, deadline: Deadline) -> float:
    """When Docker logged ``container``'s first line holding ``marker`` (its own wall clock)."""
    with docker.start(["logs", "--follow", "--timestamps", container], deadline) as process:
        for raw in process.stdout:
            stamp, _, text = raw.decode(errors="replace").partition(" ")
            at = parse_docker_time(stamp)
            if marker in text and at is not None:
                return at
    raise JobFailed(f"{container} ended without a line holding {marker!r}; {deadline.timeout_message()}")


def cpu_seconds(docker: DockerCli, container: str) -> float:
    text = docker.run(["exec", container, "sh", "-c", CPU_USAGE], Deadline(30, f"{container}'s CPU time"))
    usage = re.search(r"usage_usec (\d+)", text)
    return int(usage[1]) / 1e6 if usage else int(text.split()[0]) / 1e9


def crowd_arguments(docker: DockerCli, network: str) -> list[str]:
    """The crowd's payload arguments: the network's highest addresses, silent ones first."""
    subnet = ipaddress.ip_network(
        docker.run(["network", "inspect", "--format", "{{(index .IPAM.Config 0).Subnet}}", network])
    )
    chosen = [str(address) for address in list(subnet.hosts())[-(SILENT_ADDRESSES + MALFORMED_ADDRESSES) :]]
    return [HOSTS[0], str(COORDINATOR_PORT), str(subnet.prefixlen), ",".join(chosen[:SILENT_ADDRESSES]),
            ",".join(chosen[SILENT_ADDRESSES:]), str(CONNECTIONS_PER_ADDRESS)]  # fmt: skip


class StartRun:
    """One job, its worker started on cue, and in the crowded run the crowd before it."""

    def __init__(self, ctx: Context, crowded: bool) -> None:
        self.ctx, self.crowded = ctx, crowded
        self.docker = ctx.created.docker
        self.name = f"sagetrain-bench-{secrets.token_hex(3)}"
        self.network = f"{self.name}-net"
        self.containers = {host: f"{self.name}-{host}" for host in HOSTS}
        self.crowd = f"{self.name}-crowd"
        self.deadline = Deadline(JOB_SECONDS, f"a job of figure {NUMBER}", "raise JOB_SECONDS in its figure")

    def create(self) -> None:
        spec = JobSpec(self.ctx.image, len(HOSTS), PAYLOAD, "mpi_probe.py", SPEC_HYPERPARAMETERS)
        trees = self.ctx.workdir / self.name
        write_trees(spec, self.name, trees)
        self.ctx.created.create_network(self.network)
        for host, container in self.containers.items():
            self.ctx.created.create_container(container, [
                "--hostname", host, "--network", self.network, "--network-alias", host,
                "--mount", f"type=bind,source={(trees / host).resolve()},target=/opt/ml",
                self.ctx.image, "train",
            ])  # fmt: skip

    def start_crowd(self) -> None:
        self.ctx.created.create_container(self.crowd, [
            "--network", self.network, "--cap-add", "NET_ADMIN", "--ulimit", "nofile=4096:4096",
            "--mount", f"type=bind,source={PAYLOAD},target=/payload,readonly", "--entrypoint", "python",
            self.ctx.image, "/payload/coordinator_crowd.py", *crowd_arguments(self.docker, self.network),
        ])  # fmt: skip
        self.docker.run(["start", self.crowd])
        logged_at(self.docker, self.crowd, READY, self.deadline)

    def run(self) -> Start:
        master, worker = self.containers[HOSTS[0]], self.containers[HOSTS[1]]
        self.create()
        self.docker.run(["start", master])
        logged_at(self.docker, master, WAITING, self.deadline)
        if self.crowded:
            self.start_crowd()
        cpu_before, wall_before = cpu_seconds(self.docker, master), time.time()
        self.docker.run(["start", worker])
        joined = logged_at(self.docker, worker, JOINED, self.deadline)
        share = (cpu_seconds(self.docker, master) - cpu_before) / (time.time() - wall_before)
        self.docker.run(["wait", master, worker], self.deadline)
        return Start(self._started() - self._worker_started(), joined - self._worker_started(), share)

    def _worker_started(self) -> float:
        text = self.docker.run(["inspect", "--format", "{{.State.StartedAt}}", self.containers[HOSTS[1]]])
        started = parse_docker_time(text)
        if started is None:
            raise JobFailed(f"Docker gave {self.containers[HOSTS[1]]} no start time ({text!r})")
        return started

    def _started(self) -> float:
        """Every rank's first line (mpi_probe.py's stamps, in the master's log), once both exited 0."""
        codes = self.docker.run(["inspect", "--format", "{{.State.ExitCode}}", *self.containers.values()])
        output = self.docker.logs(self.containers[HOSTS[0]])
        if codes.split() != ["0"] * len(HOSTS):
            raise JobFailed(f"figure {NUMBER}'s job failed (exit codes {codes.split()}):\n{output[-2000:]}")
        stamps = [float(value) for value in re.findall(r"\bfirst_line=(\d+\.\d+)", output)]
        if len(stamps) != len(HOSTS):
            raise JobFailed(f"figure {NUMBER}: {len(stamps)} ranks' first lines:\n{output[-2000:]}")
        return max(stamps)

    def remove(self) -> None:
        self.ctx.created.remove_containers([*self.containers.values(), self.crowd])
        self.ctx.created.remove_network(self.network)
        shutil.rmtree(self.ctx.workdir / self.name, ignore_errors=True)


def measure(ctx: Context, crowded: bool) -> Start:
    run = StartRun(ctx, crowded)
    try:
        return run.run()
    finally:
        run.remove()


def samples(ctx: Context) -> list[Row]:
    pairs: list[tuple[Start, Start]] = []
    for index, crowded_first in alternating(ctx.runs):
        order = [True, False] if crowded_first else [False, True]
        measured = {crowded: measure(ctx, crowded) for crowded in order}
        crowded, alone = measured[True], measured[False]
        ctx.say(
            f"[{NUMBER}] run {index + 1}: started in {crowded.start_seconds:.2f} s crowded, "
            f"{alone.start_seconds:.2f} s alone; master CPU {crowded.master_cpu_share:.1%} crowded"
        )
        pairs.append((crowded, alone))
    return [
        Row(NUMBER, "worker start -> every rank running", "crowded", "alone", "s",
            tuple((c.start_seconds, a.start_seconds) for c, a in pairs),
            Target(TargetKind.RATIO_AT_MOST, 2.0)),
        Row(NUMBER, "worker start -> joined", "crowded", "alone", "s",
            tuple((c.join_seconds, a.join_seconds) for c, a in pairs), NO_TARGET),
        Row(NUMBER, "master CPU before the worker joined", "crowded", "alone", "%",
            tuple((100 * c.master_cpu_share, 100 * a.master_cpu_share) for c, a in pairs),
            Target(TargetKind.OURS_AT_MOST, 25.0)),
    ]  # fmt: skip
