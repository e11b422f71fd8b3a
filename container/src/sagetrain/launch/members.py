"""Members-only ports: every port the job's processes listen on takes connections from the job's hosts and
from loopback, from no one else on the job's network.

How: every process the job starts preloads a small library of ours (``contracts.MEMBERS_FILTER_LIBRARY``,
container/members-only/members_only.c) whose ``accept``/``accept4`` reset a connection from any other
address before the program sees it. TensorFlow's gRPC servers, Open MPI's daemons, PMIx and TCP transport,
NCCL's sockets, Gloo and sshd all accept through those two functions of the C library. Only accepting
costs anything: what flows on a connection once accepted is not touched.

Who is a member: the addresses listed in this host's members file (``RunDir.members_file``): the address
each host proved membership of the job from on its coordinator connection, as the master met it, and the
master's own as they reached it, which the master sends every worker over that authenticated connection
once all have joined (a ``Members`` message); and this host's own addresses (a packet from outside that
claims one of them is dropped by the kernel). Each engine writes the file before any port of the job opens
(single: at its start; TF_CONFIG: before the program and the parameter server start; MPI: before the
worker's sshd starts, and the master runs mpirun only once every worker has written its file). Until it
exists, the library takes loopback alone.

Where the library is preloaded (``LD_PRELOAD``): the job environment every program gets (``JobSpec.env``:
the rank launcher and the program; mpirun, and through it the ranks it starts here and its ``-x`` list),
the parameter server task's environment, sshd's own environment and, through ``SetEnv`` in its
configuration, every session it starts (orted and the ranks orted starts). The SageMaker SDK's MPI driver
gets it in its environment before it runs (sdk/ssh.py). The coordinator, in the launcher's own process,
is the one port without it: its handshake is how a host proves membership.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from sagetrain import contracts
from sagetrain.atomic_file import write_atomically
from sagetrain.contracts import RunDir
from sagetrain.launch.network import interface_addresses

log = logging.getLogger(__name__)


def preload_value(library: Path, current: str) -> str:
    """``LD_PRELOAD`` with ``library`` first, then what ``current`` already preloads (once). Pure."""
    others = [entry for entry in current.replace(":", " ").split() if entry != str(library)]
    return " ".join([str(library), *others])


def filter_env(library: Path | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that load ``library`` into a process whose environment is ``environ`` otherwise; none
    when there is no library (the setting is off). Pure."""
    if library is None:
        return {}
    return {contracts.PRELOAD_VAR: preload_value(library, environ.get(contracts.PRELOAD_VAR, ""))}


def chosen_filter(wanted: bool, library: Path, installed: bool) -> Path | None:
    """The library the job's processes preload: ``library`` when the job wants members-only ports
    (``sagetrain_members_only_ports``) and it is installed; else None. Pure."""
    return library if wanted and installed else None


def missing_filter_warning(wanted: bool, library: Path | None, environ: Mapping[str, str]) -> str | None:
    """What a job in this image that wants members-only ports but cannot have them says; None otherwise
    (outside the image, where tests run the launcher, there is no library to miss). Pure."""
    if not wanted or library is not None or environ.get(contracts.IN_IMAGE_VAR) != "1":
        return None
    return (
        f"{contracts.MEMBERS_FILTER_LIBRARY} is not installed, so the ports the job's processes listen on "
        "take connections from anyone on the job's network; run the job in this project's image"
    )


def members_text(addresses: Iterable[str]) -> str:
    """The members file's text: each address once, one per line, in order, without loopback's (the library
    takes those anyway). Pure; ValueError for text that is not an IP address."""
    parsed = {ipaddress.ip_address(address) for address in addresses}
    parsed = {address for address in parsed if not address.is_loopback}
    ordered = sorted(parsed, key=lambda address: (address.version, address))
    return "".join(f"{address}\n" for address in ordered)


def write_members(run_dir: RunDir, addresses: Iterable[str], own: Iterable[str]) -> tuple[str, ...]:
    """Write this host's members file: ``addresses`` (the job's hosts, as the master met them) and ``own``
    (this host's interfaces' addresses); readable by every user (the parameter server task runs as one of
    its own). What it lists."""
    text = members_text([*addresses, *own])
    run_dir.root.mkdir(parents=True, exist_ok=True)
    write_atomically(run_dir.members_file, text)
    run_dir.members_file.chmod(0o644)
    members = tuple(text.split())
    log.info(
        "the job's ports take connections from loopback and %s", ", ".join(members) or "no other address"
    )
    return members


def write_job_members(library: Path | None, run_dir: RunDir, addresses: Iterable[str]) -> None:
    """This host's members file, from the job's hosts' ``addresses`` and this host's interfaces, when the
    job's processes preload ``library``; nothing when they preload none."""
    if library is not None:
        write_members(run_dir, addresses, interface_addresses().values())
