"""A multi-host MPI worker host with real sshd, driven by a master coordinator played by the test.

The worker (the real entry, host "127.0.0.1") generates its host key, joins the master ("localhost"),
authorizes the master's key, takes the job's members, starts sshd and reports ready. The test then logs
in over ssh with strict host key checking against the key the worker sent (what mpirun's ssh does), and
finally sends a verdict: the worker must exit with that verdict's code and write the same cause.
"""

import subprocess

import pytest
from conftest import make_tree, unused_port
from sagetrain.deadline import Deadline
from sagetrain.launch.coordinator import EventQueue, HostChanged, HostState, Members, Welcome
from sagetrain.launch.coordinator.server import CoordinatorServer
from sagetrain.launch.sshd import generate_key, known_hosts_text
from sagetrain.report.verdict import Verdict


def next_event(events, state, activity):
    deadline = Deadline(60, activity)
    while True:
        event = events.get(deadline)
        assert event is not None, deadline.timeout_message()
        if isinstance(event, HostChanged) and event.state is state:
            return event


@pytest.mark.timeout(120)
def test_worker_sshd_accepts_the_master_key_and_the_worker_exits_with_the_verdict(tmp_path, free_port):
    ssh_port = free_port
    coordinator_port = unused_port()
    worker = make_tree(
        tmp_path,
        "worker",
        hosts=["localhost", "127.0.0.1"],
        current="127.0.0.1",
        hyperparameters={
            "sagemaker_program": "train.py",
            "sagemaker_mpi_enabled": True,
            "sagetrain_ssh_port": ssh_port,
            "sagetrain_coordinator_port": coordinator_port,
        },
    )
    worker.write_code("train.py", "print('ranks run here under mpirun')\n")

    client_key = tmp_path / "master" / "id_ed25519"
    client_public = generate_key(client_key, "test-master")
    events = EventQueue()
    server = CoordinatorServer(
        events,
        ["127.0.0.1"],
        lambda hello: Welcome(ssh_client_key=client_public),
        host_keys={"127.0.0.1": worker.host_key("127.0.0.1")},
        bind_address="127.0.0.1",
        port=coordinator_port,
    )
    server.start()
    process = worker.start()
    try:
        joined = next_event(events, HostState.JOINED, "the worker's hello")
        server.send_to("127.0.0.1", Members(("127.0.0.1",)))  # every host has joined
        next_event(events, HostState.READY, "the worker to authorize our key")
        known_hosts = tmp_path / "master" / "known_hosts"
        known_hosts.write_text(known_hosts_text({"127.0.0.1": joined.hello.ssh_host_key}, ssh_port))
        login = subprocess.run(
            [
                "ssh",
                "-p",
                str(ssh_port),
                "-i",
                str(client_key),
                "-o",
                f"UserKnownHostsFile={known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
                "root@127.0.0.1",
                "echo",
                "logged-in",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if login.stdout.strip() != "logged-in":
            process.kill()
            pytest.fail(f"ssh: {login.stderr}\nthe worker printed:\n{process.communicate(timeout=30)[0]}")
        server.broadcast(Verdict(4, "train.py exited with code 4 on rank 0 (host localhost)", "details"))
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        server.close()
    assert process.returncode == 4, output
    assert (
        worker.failure.read_text().splitlines()[0] == "train.py exited with code 4 on rank 0 (host localhost)"
    )
    assert not (worker.run_dir / "ssh" / "ssh_host_ed25519_key").read_text().startswith("-----BEGIN RSA")
