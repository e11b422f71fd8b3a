"""Run inside a job's container (its text as `python -c`): every TCP socket listening there on an address
other than loopback, with the process that owns it (pid, command line, user, whether the members-only
library is loaded in it). Prints one line: ``LISTENING <json list>``. Reads /proc only, what `ss -ltnp`
reads."""

import json
import socket
from pathlib import Path

LISTEN = "0A"
LIBRARY = "libsagetrain-members-only.so"


def address_of(text: str) -> str:
    """An address as /proc/net/tcp{,6} writes it: 32-bit words in the host's (little-endian) order."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words)


def listening() -> list[tuple[str, int, str]]:
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with Path(table).open() as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == LISTEN:
                    address, port = local.split(":")
                    found.append((address_of(address), int(port, 16), inode))
    return found


def owners() -> dict[str, int]:
    """socket inode -> pid of a process holding it."""
    found = {}
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        try:
            for fd in (process / "fd").iterdir():
                target = str(fd.readlink())
                if target.startswith("socket:["):
                    found.setdefault(target[8:-1], int(process.name))
        except OSError:
            continue
    return found


def described(pid: int) -> dict:
    process = Path(f"/proc/{pid}")
    command = (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    status = (process / "status").read_text().splitlines()
    uid = next(int(line.split()[1]) for line in status if line.startswith("Uid:"))
    preloaded = LIBRARY in (process / "maps").read_text()
    return {"pid": pid, "command": command, "uid": uid, "preloaded": preloaded}


def main() -> None:
    pids = owners()
    sockets = []
    for address, port, inode in listening():
        if address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1"):
            continue
        pid = pids.get(inode)
        sockets.append({"address": address, "port": port, **(described(pid) if pid else {"pid": None})})
    print("LISTENING " + json.dumps(sockets), flush=True)


main()
