"""ssh for the SageMaker SDK v3's MPI driver: keys made for this job, derived from its membership key.

The driver (``mpi_driver.py`` in sagemaker-train) assumes what AWS's images bake in: sshd host keys, and a
root key pair every container shares in ``authorized_keys``. It starts ``/usr/sbin/sshd -D`` with the
system configuration, connects with paramiko (``~/.ssh/known_hosts``, ``~/.ssh/id_*``, any host key of an
``algo-*`` host accepted), runs ``ssh <host> touch …`` with the system client, and ``mpirun`` over ssh.

No key is in this image. Before the driver starts, every host derives the same two ed25519 keys from the
job's membership key (``launch/membership.py``: what every host of the job has and the network does not):
the job's host key and the job's client key. It writes the host key where sshd looks, a drop-in sshd
configuration that accepts public keys only, the client key as root's identity, ``authorized_keys`` with
the job's client key alone and ``known_hosts`` with the job's host key for the job's hosts alone. So the
job's hosts log in to each other, and a peer without the membership key can neither log in nor pass as one
of them. When ``resourceconfig.json`` names an interface that does not exist (SDK v3 local mode names
``ethwe``), the driver is told the one that routes to the other hosts, as our own launcher chooses it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from sagetrain.atomic_file import write_atomically
from sagetrain.config.hyperparameters import LaunchSettings
from sagetrain.launch.membership import SECRET_VAR, Membership
from sagetrain.launch.sshd import PRIVILEGE_SEPARATION_DIR, SshFiles, key_only_settings

log = logging.getLogger(__name__)

_HOST_KEY_INFO = b"sagetrain sdk ssh host key v1"
_CLIENT_KEY_INFO = b"sagetrain sdk ssh client key v1"
# The variable the SDK's driver reads for mpirun's interface options (written by its environment.py).
INTERFACE_VAR = "SM_NETWORK_INTERFACE_NAME"


@dataclass(frozen=True)
class KeyPair:
    private_openssh: str  # the OpenSSH private key file's text
    public_line: str  # "ssh-ed25519 AAAA… comment"

    def __repr__(self) -> str:
        return f"KeyPair(public_line={self.public_line!r}, private_openssh=<hidden>)"


def derive_key_pair(membership: Membership, info: bytes, comment: str) -> KeyPair:
    """The ed25519 key pair whose seed is an HMAC of the job key: the same on every host of the job."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    seed = hmac.new(membership.job_key, info, hashlib.sha256).digest()
    key = Ed25519PrivateKey.from_private_bytes(seed)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return KeyPair(private, f"{public.decode()} {comment}")


@dataclass(frozen=True)
class JobSshKeys:
    host: KeyPair
    client: KeyPair

    @classmethod
    def of(cls, membership: Membership) -> JobSshKeys:
        return cls(
            host=derive_key_pair(membership, _HOST_KEY_INFO, "sagetrain-job-host"),
            client=derive_key_pair(membership, _CLIENT_KEY_INFO, "sagetrain-job-client"),
        )


def sshd_drop_in_text(files: SshFiles) -> str:
    """sshd's settings for the job (a drop-in is read before the main file, so its values win)."""
    extra = ["PermitEmptyPasswords no", "HostbasedAuthentication no", "X11Forwarding no", ""]
    return "\n".join([*key_only_settings(files), *extra])


def known_hosts_text(hosts: tuple[str, ...], host_public_line: str) -> str:
    """The job's host key for the job's hosts, and nothing else."""
    key = " ".join(host_public_line.split()[:2])
    return f"{','.join(hosts)} {key}\n"


def write_ssh_files(keys: JobSshKeys, hosts: tuple[str, ...], files: SshFiles) -> None:
    """Every file the driver's sshd, ssh and paramiko read, replacing what was there."""
    home_ssh = files.client_key.parent
    home_ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    home_ssh.chmod(0o700)
    write_atomically(files.host_key, keys.host.private_openssh, private=True)
    write_atomically(files.host_key.with_name(files.host_key.name + ".pub"), keys.host.public_line + "\n")
    write_atomically(files.sshd_config, sshd_drop_in_text(files))
    write_atomically(files.client_key, keys.client.private_openssh, private=True)
    write_atomically(
        files.client_key.with_name(files.client_key.name + ".pub"), keys.client.public_line + "\n"
    )
    write_atomically(files.authorized_keys, keys.client.public_line + "\n", private=True)
    write_atomically(files.known_hosts, known_hosts_text(hosts, keys.host.public_line), private=True)


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
    """Before the SDK's MPI driver runs on this host: the job's ssh keys and files, and its interface."""
    from sagetrain.preparation import Preparation, prepare_job

    config = prepare_job(environ, Preparation.DESCRIBE).config
    if not (environ.get(SECRET_VAR) or config.settings.launch.job_secret):
        sys.stderr.write(
            f"sagetrain WARNING: no job secret (hyperparameter {LaunchSettings.key('job_secret')} or "
            f"{SECRET_VAR}): the job's ssh keys derive from its hyperparameters, channels and SageMaker job "
            "identity alone, so a peer that knows all of them could derive them too; set a secret to make "
            "root's ssh login unguessable\n"
        )
    keys = JobSshKeys.of(Membership.of_job(config, environ))
    files = files or SshFiles.system(Path("/etc/ssh"), Path.home() / ".ssh")
    write_ssh_files(keys, config.resources.hosts, files)
    PRIVILEGE_SEPARATION_DIR.mkdir(mode=0o755, exist_ok=True)
    tell_interface(environ, config.resources.hosts, config.resources.current_host)
