"""sshd for multi-host MPI: keys made at container start (none in the image), our own config file.

Nothing global is edited: sshd reads our config, mpirun's ssh gets our key and known_hosts through
``plm_rsh_args``.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError
from sagetrain.launch.process import ManagedProcess

SSHD = "/usr/sbin/sshd"
PRIVILEGE_SEPARATION_DIR = Path("/run/sshd")


@dataclass(frozen=True)
class SshFiles:
    directory: Path

    @property
    def host_key(self) -> Path:
        return self.directory / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.directory / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.directory / "authorized_keys"

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def sshd_config(self) -> Path:
        return self.directory / "sshd_config"


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
        )
    except FileNotFoundError:
        raise PlatformError(
            "ssh-keygen is not installed in this image; multi-host MPI needs openssh"
        ) from None
    except subprocess.CalledProcessError as error:
        raise PlatformError(f"ssh-keygen failed: {error.stderr.strip()}") from None
    return path.with_suffix(".pub").read_text().strip()


def sshd_config_text(files: SshFiles, port: int) -> str:
    return "\n".join(
        [
            f"Port {port}",
            f"HostKey {files.host_key}",
            f"AuthorizedKeysFile {files.authorized_keys}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PidFile none",
            "PrintMotd no",
            "UseDNS no",
            "LogLevel ERROR",
            "",
        ]
    )


def start_sshd(files: SshFiles, port: int) -> tuple[ManagedProcess, str]:
    """Generate the host key, write the config, start ``sshd -D -e``; (process, host public key)."""
    host_public_key = generate_key(files.host_key, "sagetrain-host")
    files.authorized_keys.touch(mode=0o600)
    files.sshd_config.write_text(sshd_config_text(files, port))
    PRIVILEGE_SEPARATION_DIR.mkdir(mode=0o755, exist_ok=True)
    argv = [SSHD, "-D", "-e", "-f", str(files.sshd_config), "-p", str(port)]
    try:
        return ManagedProcess.start(argv, name="sshd"), host_public_key
    except FileNotFoundError:
        raise PlatformError(
            f"{SSHD} is not installed in this image; multi-host MPI needs openssh-server"
        ) from None


def wait_until_accepting(port: int, process: ManagedProcess, deadline: Deadline) -> None:
    """Until sshd on this host answers with its banner; fails early if sshd exits."""
    pause = threading.Event()
    delay = 0.05
    while True:
        code = process.poll()
        if code is not None:
            raise PlatformError(f"sshd exited with code {code} at start; see its messages above")
        try:
            with socket.create_connection(
                ("127.0.0.1", port), timeout=max(0.1, deadline.remaining())
            ) as sock:
                if sock.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if deadline.expired():
            raise PlatformError(deadline.timeout_message())
        pause.wait(min(delay, deadline.remaining()))
        delay = min(delay * 2, 1.0)


def write_authorized_key(files: SshFiles, public_key: str) -> None:
    files.authorized_keys.write_text(public_key.strip() + "\n")
    files.authorized_keys.chmod(0o600)


def known_hosts_text(host_keys: dict[str, str], port: int) -> str:
    def pattern(host: str) -> str:
        return host if port == 22 else f"[{host}]:{port}"

    return "".join(
        f"{pattern(host)} {' '.join(key.split()[:2])}\n" for host, key in sorted(host_keys.items())
    )
