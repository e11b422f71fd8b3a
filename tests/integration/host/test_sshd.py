"""sshd as the MPI worker starts it: ready when sshd says it listens, failing at once when sshd cannot
start, never waiting out the deadline."""

import os
import socket

import pytest
from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError
from sagetrain.launch.sshd import SshFiles, generate_host_key, start_sshd

pytestmark = pytest.mark.timeout(60)


def test_sshd_is_ready_when_it_says_it_listens(tmp_path, free_port):
    files = SshFiles.in_folder(tmp_path)
    host_key = generate_host_key(files)
    sshd = start_sshd(files, free_port, os.environ, {})
    try:
        sshd.wait_until_listening(Deadline(30, "sshd to listen"))
        with socket.create_connection(("127.0.0.1", free_port), timeout=5) as connection:
            assert connection.recv(4) == b"SSH-"
        assert host_key.startswith("ssh-ed25519 ")
    finally:
        sshd.process.terminate_tree()


def test_sshd_whose_port_is_taken_on_ipv4_fails_at_once_rather_than_listen_on_ipv6_alone(tmp_path, free_port):
    files = SshFiles.in_folder(tmp_path)
    generate_host_key(files)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", free_port))
        holder.listen()
        sshd = start_sshd(files, free_port, os.environ, {})
        try:
            # Left to bind any family, sshd would say it listens on "::" and refuse IPv4 logins.
            with pytest.raises(PlatformError, match=r"sshd exited with code [1-9][0-9]* at start"):
                sshd.wait_until_listening(Deadline(30, "sshd to listen"))
        finally:
            sshd.process.terminate_tree()


def test_sshd_that_cannot_start_fails_at_once_naming_its_exit(tmp_path):
    files = SshFiles.in_folder(tmp_path)
    generate_host_key(files)
    sshd = start_sshd(files, 70000, os.environ, {})  # sshd refuses the port number and exits
    try:
        # The exit is noticed, not the deadline: a timeout would say "timed out after 30 s".
        with pytest.raises(PlatformError, match=r"sshd exited with code [1-9][0-9]* at start"):
            sshd.wait_until_listening(Deadline(30, "sshd to listen"))
    finally:
        sshd.process.terminate_tree()
