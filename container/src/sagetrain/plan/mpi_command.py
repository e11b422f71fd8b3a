"""The mpirun argument list: our defaults, then ``sagemaker_mpi_custom_mpi_options``, which override them.

OpenMPI refuses an MCA parameter given twice on one command line, so "override" means: a default whose
option the custom options also give is dropped, then the custom options are appended as written. The
options that set how many ranks run where (``-np``, ``-H``...) are refused when hyperparameters.json is
read (config/mpi_options.py): the plan owns them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sagetrain.config.mpi_options import option_key, option_keys
from sagetrain.plan.model import Plan
from sagetrain.redact import stays_on_host

# Variables that belong to one process or to mpirun itself and must not be copied to every rank.
_NOT_FORWARDED = frozenset(
    {"HOSTNAME", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "SHELL", "USER", "LOGNAME"}
)
_NOT_FORWARDED_PREFIXES = ("OMPI_", "PMIX_", "OPAL_", "SSH_", "BASH_FUNC_")


@dataclass(frozen=True)
class SshSetup:
    """How mpirun reaches other hosts: our key, our known_hosts, the workers' sshd port."""

    identity_file: Path
    known_hosts_file: Path
    port: int

    def rsh_args(self) -> str:
        return " ".join(
            [
                "-p",
                str(self.port),
                "-i",
                str(self.identity_file),
                "-o",
                f"UserKnownHostsFile={self.known_hosts_file}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=30",
                "-o",
                "LogLevel=ERROR",
            ]
        )


def forwarded_env_names(env: Mapping[str, str]) -> list[str]:
    """What mpirun copies to every rank: the job environment, but neither what belongs to one process
    nor what stays on its host (credentials, secrets: each host's rank launcher has its own)."""
    return sorted(
        name
        for name in env
        if name not in _NOT_FORWARDED
        and not name.startswith(_NOT_FORWARDED_PREFIXES)
        and not stays_on_host(name)
    )


def launch_summary(plan: Plan, interface: str) -> str:
    """The mpirun launch in a few words, for the log (the whole command goes to the debug log). Pure."""
    hosts = ", ".join(plan.hosts)
    where = f"{plan.processes_per_host} per host on {hosts}" if plan.places_ranks else f"on {hosts}"
    if plan.multi_host:
        where += f", interface {interface}"
    custom = f"; custom mpirun options: {len(plan.custom_mpi_options)}" if plan.custom_mpi_options else ""
    return f"{plan.total_processes} ranks with mpirun ({where}){custom}"


def host_list(plan: Plan) -> str:
    if not plan.multi_host:
        # One host: mpirun starts ranks locally; the SageMaker host name need not resolve to itself.
        return f"localhost:{plan.processes_per_host}"
    return ",".join(f"{host}:{plan.processes_per_host}" for host in plan.hosts)


def mpirun_command(
    plan: Plan,
    *,
    interface: str,
    env_names: Iterable[str],
    rank_argv: Sequence[str],
    ssh: SshSetup | None,
    mpirun: str = "mpirun",
) -> list[str]:
    env_names = list(env_names)
    defaults: list[list[str]] = [
        ["-np", str(plan.total_processes)],
        ["-H", host_list(plan)],
        ["--allow-run-as-root"],
    ]
    if plan.multi_host:
        defaults += [
            ["-mca", "btl_tcp_if_include", interface],
            ["-mca", "oob_tcp_if_include", interface],
        ]
        if ssh is not None:
            defaults += [
                ["-mca", "plm_rsh_agent", "ssh"],
                ["-mca", "plm_rsh_args", ssh.rsh_args()],
                # Only the master holds our key and known_hosts: orted must not ssh onwards (tree spawn).
                ["-mca", "plm_rsh_no_tree_spawn", "1"],
            ]
        if "NCCL_SOCKET_IFNAME" not in env_names:
            defaults.append(["-x", f"NCCL_SOCKET_IFNAME={interface}"])
    defaults += [["-x", name] for name in env_names]
    if plan.mpi_yield_when_idle:
        defaults.append(["-mca", "mpi_yield_when_idle", "1"])
    defaults += [["-bind-to", "none"], ["-map-by", "slot"]]

    overridden = option_keys(plan.custom_mpi_options)
    command = [mpirun]
    for option in defaults:
        key, _ = option_key(option, 0)
        if key not in overridden:
            command += option
    command += plan.custom_mpi_options
    command += list(rank_argv)
    return command
