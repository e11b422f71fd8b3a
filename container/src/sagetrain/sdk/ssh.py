"""ssh for the SageMaker SDK v3's MPI driver: keys made at random on each host for this job, exchanged
through the coordinator's authenticated handshake.

The driver (``mpi_driver.py`` in sagemaker-train) assumes what AWS's images bake in: sshd host keys, and a
root key pair every container shares in ``authorized_keys``. It starts ``/usr/sbin/sshd -D`` with the
system configuration, connects with paramiko (``~/.ssh/known_hosts``, ``~/.ssh/id_*``, any host key of an
``algo-*`` host accepted), runs ``ssh <host> touch …`` with the system client, and ``mpirun`` over ssh.

No key is in this image, and none derives from the job: before the driver starts, every host makes an
ed25519 host key and client key of its own. Each worker joins the master's coordinator (both sides prove
membership of the job: launch/coordinator/trust.py) and sends its two public keys (``SshHello``, one of
this exchange's own messages, which only its connections read); once every worker has, the
master sends each of them every host's public keys, as ``known_hosts`` and ``authorized_keys``. sshd
accepts those client keys only (a drop-in configuration); ssh and paramiko know those host keys for the
job's hosts. So the job's hosts log in to each other (mpirun's daemons too, host to host), and nobody
else: a peer that is not a member of the job learns no public key it could test a guess against, and
sends none that would be trusted.

The same exchange gives every host the job's members (launch/members.py): the master sends, with the
keys, the address each host proved membership from. Each host writes its members file, and the driver
runs with the members-only library preloaded (its sshd and mpirun, and through them orted and the ranks;
sshd forces it on its sessions too), so the ports of the driver's job take connections from the job's
hosts alone, as our own launcher's do.

When ``resourceconfig.json`` names an interface that does not exist (SDK
v3 local mode names ``ethwe``), the driver is told the one that routes to the other hosts, as our own
launcher chooses it.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import ClassVar

from sagetrain.atomic_file import write_atomically
from sagetrain.config.job_secret import Membership, missing_secret_warning
from sagetrain.contracts import MEMBERS_FILTER_LIBRARY, RunDir
from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError
from sagetrain.launch.coordinator import (
    CORE,
    EventQueue,
    Hello,
    JobHosts,
    MasterCoordinator,
    WorkerCoordinator,
)
from sagetrain.launch.members import chosen_filter, filter_env, missing_filter_warning, write_job_members
from sagetrain.launch.sshd import (
    PRIVILEGE_SEPARATION_DIR,
    SshFiles,
    command_only_settings,
    generate_key,
    key_only_settings,
    known_hosts_text,
    session_env,
    set_env_setting,
)

log = logging.getLogger(__name__)

# The variable the SDK's driver reads for mpirun's interface options (written by its environment.py).
INTERFACE_VAR = "SM_NETWORK_INTERFACE_NAME"
# The port the SDK's driver and mpirun's ssh use: the system's sshd, as it is configured.
SYSTEM_SSH_PORT = 22
# An OpenSSH public key line as this image makes them, and nothing else (a peer's keys end up in files sshd
# and ssh read: no options, no second line).
_PUBLIC_KEY_LINE = re.compile(r"ssh-ed25519 [A-Za-z0-9+/]{68}(=|==)?( [A-Za-z0-9@._-]{1,64})?")


class SshKind(Enum):
    """The key exchange's own messages: the coordinator reads them only on its connections."""

    HELLO = "ssh_hello"
    TRUST = "ssh_trust"


@dataclass(frozen=True)
class SshTrust:
    """Every host's public keys, as the files that hold them: from the master to each worker."""

    KIND: ClassVar[Enum] = SshKind.TRUST
    known_hosts: str
    authorized_keys: str
    # The addresses the job's hosts proved membership from (launch/members.py).
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class SshHello(Hello):
    """A worker joining the key exchange: its host key, and the key its ssh logs in to the others with."""

    KIND: ClassVar[Enum] = SshKind.HELLO
    ssh_client_key: str = ""


# The coordinator's messages and the key exchange's.
SSH_MESSAGES = CORE.extended(SshHello, SshTrust)


@dataclass(frozen=True)
class HostSshKeys:
    """This host's public keys for the job (their private halves are in the files they were made in)."""

    host: str  # "ssh-ed25519 AAAA… comment"
    client: str

    @classmethod
    def generate(cls, files: SshFiles) -> HostSshKeys:
        files.client_key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        files.client_key.parent.chmod(0o700)
        return cls(
            host=generate_key(files.host_key, "sagetrain-job-host"),
            client=generate_key(files.client_key, "sagetrain-job-client"),
        )


def public_key_problem(line: str) -> str | None:
    """Why ``line`` is not an ed25519 public key line as this image makes them; None when it is. Pure."""
    return None if _PUBLIC_KEY_LINE.fullmatch(line) else "not one ssh-ed25519 public key line"


def trust_of(keys: dict[str, HostSshKeys], members: tuple[str, ...] = ()) -> SshTrust:
    """Every host's public keys, as the known_hosts and authorized_keys every host writes, and the job's
    members. Pure."""
    return SshTrust(
        known_hosts=known_hosts_text({host: key.host for host, key in keys.items()}, SYSTEM_SSH_PORT),
        authorized_keys="".join(f"{keys[host].client}\n" for host in sorted(keys)),
        members=members,
    )


def sshd_drop_in_text(files: SshFiles, session: Mapping[str, str]) -> str:
    """sshd's settings for the job (a drop-in is read before the main file, so its values win): the job's
    keys alone, a command and nothing more, ``session`` forced on every session."""
    extra = ["PermitEmptyPasswords no", "HostbasedAuthentication no"]
    return "\n".join(
        [*key_only_settings(files), *extra, *command_only_settings(), *set_env_setting(session), ""]
    )


def write_trust(trust: SshTrust, files: SshFiles, session: Mapping[str, str]) -> None:
    """The files the driver's sshd, ssh and paramiko read besides the keys, replacing what was there."""
    write_atomically(files.sshd_config, sshd_drop_in_text(files, session))
    write_atomically(files.authorized_keys, trust.authorized_keys, private=True)
    write_atomically(files.known_hosts, trust.known_hosts, private=True)


def _checked_hello(host: str, hello: Hello) -> HostSshKeys:
    client_key = hello.ssh_client_key if isinstance(hello, SshHello) else ""
    for line in (hello.ssh_host_key, client_key):
        problem = public_key_problem(line)
        if problem is not None:
            raise PlatformError(
                f"host {host} sent an ssh key that is {problem}; every host must run this image"
            )
    return HostSshKeys(hello.ssh_host_key, client_key)


@dataclass(frozen=True)
class KeyExchange:
    """This host's part in the exchange of the job's ssh keys."""

    hosts: tuple[str, ...]
    master: str
    current_host: str
    port: int  # the coordinator's
    membership: Membership
    deadline: Deadline

    @property
    def job(self) -> JobHosts:
        return JobHosts(self.hosts, self.master, self.current_host, self.port, self.membership)

    def deadline_for(self, activity: str) -> Deadline:
        """The exchange's one deadline, whatever part of it is awaited."""
        return self.deadline


def exchange_keys(exchange: KeyExchange, own: HostSshKeys) -> SshTrust:
    """The job's trust: this host's own keys alone on one host; otherwise every host's, through the master."""
    if not exchange.job.workers:
        return trust_of({exchange.current_host: own})
    if exchange.current_host == exchange.master:
        return _exchange_as_master(exchange, own)
    return _exchange_as_worker(exchange, own)


def _exchange_as_master(exchange: KeyExchange, own: HostSshKeys) -> SshTrust:
    """Wait for every worker's keys, send each of them the job's trust."""
    coordinator = MasterCoordinator(exchange.job, EventQueue(), catalogue=SSH_MESSAGES)
    coordinator.open()
    workers, port = exchange.job.workers, coordinator.port
    their = "its" if len(workers) == 1 else "their"
    sys.stderr.write(f"sagetrain: waiting for {', '.join(workers)} to send {their} ssh keys to port {port}\n")
    try:
        hellos = coordinator.wait_for_workers(exchange.deadline_for, until_ready=False)
        keys = {host: _checked_hello(host, hello) for host, hello in hellos.items()}
        trust = trust_of({**keys, exchange.current_host: own}, coordinator.member_addresses())
        for worker in workers:
            try:
                coordinator.send_to(worker, trust)
            except OSError:
                raise PlatformError(
                    f"host {worker} sent its ssh keys, then its connection to port {port} closed before it "
                    "had the job's; see that host's log for why"
                ) from None
        # A worker closes its connection once it has the keys.
        still = coordinator.wait_until_disconnected(exchange.deadline)
        if still:
            raise PlatformError(
                exchange.deadline.timeout_message(f"{', '.join(still)} did not take the ssh keys")
            )
    finally:
        coordinator.close()
    return trust


def _exchange_as_worker(exchange: KeyExchange, own: HostSshKeys) -> SshTrust:
    """Join the master with this host's keys; the job's trust, as the master sent it."""
    worker = WorkerCoordinator(exchange.job, EventQueue(), catalogue=SSH_MESSAGES)
    try:
        worker.join(SshHello(ssh_host_key=own.host, ssh_client_key=own.client), exchange.deadline_for)
        trust = worker.receive(exchange.deadline)
    finally:
        worker.close()
    if not isinstance(trust, SshTrust):
        raise PlatformError(
            exchange.deadline.timeout_message(f"master host {exchange.master} sent no ssh keys")
        )
    return trust


def tell_interface(environ: MutableMapping[str, str], hosts: tuple[str, ...], current_host: str) -> None:
    """Point the driver's interface variable at an interface that exists, when the named one does not."""
    from sagetrain.launch.network import choose_interface, interface_addresses, local_address_towards

    requested = environ.get(INTERFACE_VAR)
    peers = [host for host in hosts if host != current_host]
    if not requested or not peers:
        return
    interface, warning = choose_interface(requested, interface_addresses(), local_address_towards, peers[0])
    if warning:
        log.warning("%s (for the SageMaker SDK's MPI driver)", warning)
        environ[INTERFACE_VAR] = interface


def prepare_for_mpi_driver(environ: MutableMapping[str, str], files: SshFiles | None = None) -> None:
    """Before the SDK's MPI driver runs on this host: the job's ssh keys and files, the driver's
    environment without our settings, and its interface."""
    from sagetrain.launch.spec import setting_deadline
    from sagetrain.preparation import Preparation, prepare_job

    job = prepare_job(environ, Preparation.DESCRIBE)
    plan = job.plan
    warning = missing_secret_warning(len(plan.hosts), job.secrets.secret)
    if warning is not None:
        sys.stderr.write(f"sagetrain WARNING: {warning}\n")
    files = files or SshFiles.system(Path("/etc/ssh"), Path.home() / ".ssh")
    own = HostSshKeys.generate(files)
    launch = plan.launch
    activity = f"the job's hosts to exchange ssh keys through {plan.master} port {launch.coordinator_port}"
    deadline = setting_deadline(launch.worker_wait_seconds, "worker_wait_seconds", activity, "hosts")
    exchange = KeyExchange(
        plan.hosts, plan.master, plan.current_host, launch.coordinator_port, job.secrets.membership, deadline
    )
    trust = exchange_keys(exchange, own)
    run_dir = RunDir.from_env(environ)
    members_filter = chosen_filter(
        plan.launch.members_only_ports, MEMBERS_FILTER_LIBRARY, MEMBERS_FILTER_LIBRARY.is_file()
    )
    warning = missing_filter_warning(plan.launch.members_only_ports, members_filter, environ)
    if warning is not None:
        sys.stderr.write(f"sagetrain WARNING: {warning}\n")
    # Before the driver starts sshd and mpirun, which preload the library from its environment.
    write_job_members(members_filter, run_dir, trust.members)
    write_trust(trust, files, session_env(members_filter, run_dir))
    environ.update(filter_env(members_filter, environ))
    PRIVILEGE_SEPARATION_DIR.mkdir(mode=0o755, exist_ok=True)
    tell_interface(environ, plan.hosts, plan.current_host)
