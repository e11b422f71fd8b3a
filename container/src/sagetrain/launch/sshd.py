"""sshd for multi-host MPI: keys made at container start (none in the image), our own config file.

Nothing global is edited: sshd reads our config, mpirun's ssh gets our key and known_hosts through
``plm_rsh_args``.

What sshd and its sessions get, and no more: sshd runs with a few variables of its own (no credentials,
no job secret: ``sshd_env``); a session gets sshd's default environment plus what ``SetEnv`` forces on it,
the members-only library (launch/members.py) and the run folder it reads its list from, so that orted and
the ranks it starts take connections from the job's hosts alone. A session runs a command and nothing
else: no forwarding of ports, agents or X11, no tunnels, no rc files, no environment of the client's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sagetrain import contracts
from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError
from sagetrain.launch.members import filter_env
from sagetrain.launch.process import ManagedProcess

SSHD = "/usr/sbin/sshd"
PRIVILEGE_SEPARATION_DIR = Path("/run/sshd")
# OpenSSH's file names, for our launcher's files and for the system's alike.
_HOST_KEY_FILE = "ssh_host_ed25519_key"
_CLIENT_KEY_FILE = "id_ed25519"
_AUTHORIZED_KEYS_FILE = "authorized_keys"
_KNOWN_HOSTS_FILE = "known_hosts"
# The SageMaker SDK's MPI driver runs the system's sshd: our settings are a drop-in file for it.
SSHD_DROP_IN = "sagetrain-job.conf"


@dataclass(frozen=True)
class SshFiles:
    """Where sshd, ssh (and paramiko) find each file: our launcher's own folder (``in_folder``), or the
    places the system's sshd and root's ssh look (``system``: for the SageMaker SDK's MPI driver)."""

    host_key: Path
    client_key: Path  # the private key ssh logs in with; ``.pub`` beside it
    authorized_keys: Path
    known_hosts: Path
    sshd_config: Path  # our sshd's whole configuration, or our drop-in for the system's

    @classmethod
    def in_folder(cls, directory: Path) -> SshFiles:
        return cls(
            host_key=directory / _HOST_KEY_FILE,
            client_key=directory / _CLIENT_KEY_FILE,
            authorized_keys=directory / _AUTHORIZED_KEYS_FILE,
            known_hosts=directory / _KNOWN_HOSTS_FILE,
            sshd_config=directory / "sshd_config",
        )

    @classmethod
    def system(cls, etc_ssh: Path, home_ssh: Path) -> SshFiles:
        return cls(
            host_key=etc_ssh / _HOST_KEY_FILE,
            client_key=home_ssh / _CLIENT_KEY_FILE,
            authorized_keys=home_ssh / _AUTHORIZED_KEYS_FILE,
            known_hosts=home_ssh / _KNOWN_HOSTS_FILE,
            sshd_config=etc_ssh / "sshd_config.d" / SSHD_DROP_IN,
        )


# Variables of the launcher's environment that sshd itself runs with: what finds programs and reads text.
_SSHD_OWN_VARS = ("PATH", "LANG", "LC_ALL", "TZ")


def key_only_settings(files: SshFiles) -> list[str]:
    """sshd settings that let in the holders of ``files.authorized_keys``' keys, and nothing else."""
    return [
        f"HostKey {files.host_key}",
        f"AuthorizedKeysFile {files.authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
    ]


def command_only_settings() -> list[str]:
    """sshd settings that give a session its command and nothing more: mpirun needs no forwarding of any
    kind, no tunnel, no rc file and no variables from the client."""
    return [
        "DisableForwarding yes",
        "PermitTunnel no",
        "PermitUserRC no",
        "PermitUserEnvironment no",
        "X11Forwarding no",
    ]


def session_env(members_filter: Path | None, run_dir: contracts.RunDir) -> dict[str, str]:
    """The variables sshd forces on every session: the members-only library (none when there is none) and
    the run folder it reads the job's members from. Pure."""
    if members_filter is None:
        return {}
    return {**filter_env(members_filter, {}), contracts.RUN_DIR_VAR: str(run_dir.root)}


def set_env_setting(env: Mapping[str, str]) -> list[str]:
    """``SetEnv`` for ``env`` (nothing when it is empty); each pair quoted, as sshd_config quotes. Pure."""
    for name, value in env.items():
        if any(character in value for character in '"\n\\'):
            raise PlatformError(f"{name}={value!r} cannot be written in sshd's configuration")
    return [" ".join(["SetEnv", *(f'"{name}={value}"' for name, value in env.items())])] if env else []


def sshd_env(environ: Mapping[str, str], session: Mapping[str, str]) -> dict[str, str]:
    """sshd's own environment: the few variables it runs with from ``environ``, and ``session``'s (it
    preloads the library its sessions do); nothing of the job's credentials or secrets. Pure."""
    return {**{name: environ[name] for name in _SSHD_OWN_VARS if name in environ}, **session}


def generate_key(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    try:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
            env=sshd_env(os.environ, {}),  # it needs no credential or secret of the job's
        )
    except FileNotFoundError:
        raise PlatformError(
            "ssh-keygen is not installed in this image; multi-host MPI needs openssh"
        ) from None
    except subprocess.CalledProcessError as error:
        raise PlatformError(f"ssh-keygen failed: {error.stderr.strip()}") from None
    return path.with_suffix(".pub").read_text().strip()


def sshd_config_text(files: SshFiles, port: int, session: Mapping[str, str]) -> str:
    return "\n".join(
        [
            f"Port {port}",
            # mpirun's ssh reaches hosts by their IPv4 names. Left to "any", an sshd whose IPv4 bind
            # fails (the port taken) still listens on IPv6, says so, and refuses every login; on IPv4
            # alone it exits at start instead, and the launcher says why.
            "AddressFamily inet",
            *key_only_settings(files),
            *command_only_settings(),
            *set_env_setting(session),
            "UsePAM no",
            "StrictModes no",
            "PidFile none",
            "PrintMotd no",
            "UseDNS no",
            # INFO: sshd says "Server listening on ... port N." once it accepts connections.
            "LogLevel INFO",
            "",
        ]
    )


# What sshd -e prints once its socket listens (sshd.c logs it at INFO before accepting).
_LISTENING = re.compile(rb"^Server listening on \S+ port (\d+)\.")


class RunningSshd:
    """sshd started by us: its process, and whether it has said that it listens.

    Its stderr is read on a thread for sshd's whole life (a full pipe would block it) and passed on to
    ours, prefixed; the line announcing the listening socket sets ``ready``, and so does sshd's exit."""

    def __init__(self, process: ManagedProcess, port: int) -> None:
        self.process = process
        self._port = port
        self._ready = threading.Event()
        self._listening = False
        self._reader = threading.Thread(target=self._read, name="sshd-stderr", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stream = self.process.popen.stderr
        assert stream is not None  # started with stderr=PIPE
        for line in stream:
            match = _LISTENING.match(line)
            if match and int(match.group(1)) == self._port:
                self._listening = True
                self._ready.set()
            sys.stderr.write(f"sshd: {line.decode(errors='replace')}")
            sys.stderr.flush()
        self._ready.set()  # sshd has exited: waiting longer cannot help

    def wait_until_listening(self, deadline: Deadline) -> None:
        """Until sshd listens on its port; fails at once if it exits, or when ``deadline`` passes."""
        if not self._ready.wait(deadline.remaining()):
            raise PlatformError(deadline.timeout_message())
        if not self._listening:
            code = self.process.wait(deadline.remaining())
            ended = f"exited with code {code}" if code is not None else "closed its output without listening"
            raise PlatformError(f"sshd {ended} at start; see its messages above (sshd: ...)")


def generate_host_key(files: SshFiles) -> str:
    """This host's sshd key, made now; its public key line (the master's ssh will know it)."""
    return generate_key(files.host_key, "sagetrain-host")


def start_sshd(
    files: SshFiles, port: int, environ: Mapping[str, str], session: Mapping[str, str]
) -> RunningSshd:
    """Write the config, start ``sshd -D -e`` with the host key ``generate_host_key`` made: sshd runs with
    ``sshd_env`` of ``environ`` and forces ``session`` on its sessions."""
    files.authorized_keys.touch(mode=0o600)
    files.sshd_config.write_text(sshd_config_text(files, port, session))
    PRIVILEGE_SEPARATION_DIR.mkdir(mode=0o755, exist_ok=True)
    argv = [SSHD, "-D", "-e", "-f", str(files.sshd_config), "-p", str(port)]
    try:
        process = ManagedProcess.start(
            argv, name="sshd", env=sshd_env(environ, session), stderr=subprocess.PIPE
        )
    except FileNotFoundError:
        raise PlatformError(
            f"{SSHD} is not installed in this image; multi-host MPI needs openssh-server"
        ) from None
    return RunningSshd(process, port)


def write_authorized_key(files: SshFiles, public_key: str) -> None:
    files.authorized_keys.write_text(public_key.strip() + "\n")
    files.authorized_keys.chmod(0o600)


def known_hosts_text(host_keys: dict[str, str], port: int) -> str:
    def pattern(host: str) -> str:
        return host if port == 22 else f"[{host}]:{port}"

    return "".join(
        f"{pattern(host)} {' '.join(key.split()[:2])}\n" for host, key in sorted(host_keys.items())
    )
