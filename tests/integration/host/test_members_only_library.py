"""The members-only library as container/build-steps/build-members-only builds it (the image's build runs
the same script), on this machine: it exports accept and accept4 and nothing else, and a program that
preloads it, without any members file, still takes connections from loopback and from Unix sockets, through
accept() and accept4() alike. (Refusing other addresses needs a network of containers:
tests/container/test_members_only_ports.py.)"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import REPO, SRC
from sagetrain.contracts import PRELOAD_VAR, RUN_DIR_VAR

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler (gcc)"),
]

BUILD = REPO / "container" / "build-steps" / "build-members-only"
SOURCE = REPO / "container" / "members-only" / "members_only.c"

# Serves one connection on each of a loopback TCP port (accept4, Python's) and a Unix socket (libc's
# accept(), as sshd and Open MPI call it), answering "hi"; a client of each says what it got.
ROUND_TRIP = """
import ctypes, os, socket, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
def serve(listener, with_libc_accept):
    if with_libc_accept:
        connection = socket.socket(fileno=libc.accept(listener.fileno(), None, None))
    else:
        connection, _ = listener.accept()
    connection.sendall(b"hi")
    connection.close()
tcp = socket.create_server(("127.0.0.1", 0))
unix = socket.socket(socket.AF_UNIX)
unix.bind(sys.argv[1])
unix.listen()
for listener, with_libc_accept in ((tcp, False), (unix, True)):
    threading.Thread(target=serve, args=(listener, with_libc_accept)).start()
got = []
for family, address in ((socket.AF_INET, tcp.getsockname()), (socket.AF_UNIX, sys.argv[1])):
    with socket.socket(family) as client:
        client.connect(address)
        got.append(client.recv(2).decode())
print(" ".join(got))
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("members-only") / "libsagetrain-members-only.so"
    subprocess.run(
        [str(BUILD), "--source", str(SOURCE), "--package-src", str(SRC), "--out", str(out)],
        check=True, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    return str(out)


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_the_library_exports_accept_and_accept4_alone(library):
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    assert sorted(line.split()[-1] for line in listing.splitlines() if line.strip()) == ["accept", "accept4"]


def test_loopback_and_unix_socket_connections_pass_without_a_members_file(library, tmp_path):
    env = {PRELOAD_VAR: library, RUN_DIR_VAR: str(tmp_path / "no-run-folder"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP, str(tmp_path / "unix.sock")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hi", "hi"]
    assert "refused" not in done.stderr
