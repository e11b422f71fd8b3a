"""Members-only ports, in real containers on an internal network.

- The library alone: a server preloading it takes connections from loopback and from the addresses its
  members file lists, through accept() and accept4() alike, and resets everyone else's; without the file,
  loopback's alone; a file written or replaced later is read; the first refusal is said once.
- Whole jobs (Horovod, MultiWorkerMirroredStrategy, parameter server; 2 hosts, the job's secret in a channel
  file): each pauses mid-job while the test lists, from inside every container, each TCP port listening
  there (as `ss -ltnp` does), and an outsider on the job's network that knows the job's description but
  not its secret connects to every one of them and runs TensorFlow ops on every gRPC task, as anyone can
  on a TensorFlow cluster. Every port but the coordinator's (where hosts prove membership) resets the
  outsider before its program sees it, every remote op is denied, and the job then succeeds with the
  weights it would have had. In the parameter server job, the parameter server task is checked from
  inside: its user, its environment, what it can read and write.
- With ``sagetrain_members_only_ports`` off, the same outsider runs ops on a worker of the job and reads
  its credentials: what the default prevents.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest
from cluster import (
    CASES,
    DOCKER,
    RunningCluster,
    assert_identical_weights,
    files_by_host,
    outsider,
    start_cluster,
)
from conftest import TEST_LABEL
from sagetrain.config.job_secret import CHANNEL_KEY, SECRET_VAR
from sagetrain.contracts import MEMBERS_FILTER_LIBRARY, PRELOAD_VAR, RUN_DIR_VAR
from sagetrain.deadline import Deadline
from sagetrain.launch.ps_server import PS_USER
from sagetrain.redact import AWS_CREDENTIAL_VARS

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

CASE = CASES / "members_only"
LISTENING = (CASES / "inspect" / "listening.py").read_text()
SECRET = b"6c1f0a2e the job's secret, in a channel file only its hosts read 9b4d"
# What SageMaker puts in a job's environment to hand it its role, and keys a user may add: the programs
# get them, the parameter server task must not.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIAOUTSIDERSHOULDNOTSEE",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-of-the-job-0123456789",
    "AWS_SESSION_TOKEN": "session-token-of-the-job-0123456789",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/7f9e2a51-job-role",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN": "container-authorization-token-0123",
    SECRET_VAR: "environment-form-of-the-job-secret-42",
}
COORDINATOR_PORT = 7077
PROBE_SECONDS = 20.0
RELEASE_SECONDS = 300.0


def secret_channel(tmp_path: Path) -> Path:
    folder = tmp_path / "secret"
    folder.mkdir(exist_ok=True)
    (folder / "job-secret").write_bytes(SECRET)
    return folder


def start_job(
    tmp_path: Path, image: str, name: str, program: str, hyperparameters: Mapping
) -> RunningCluster:
    return start_cluster(
        tmp_path, image, 2, CASE, name=name, program=program,
        hyperparameters={**hyperparameters, CHANNEL_KEY: "secret"},
        channels={"secret": secret_channel(tmp_path)}, env=CREDENTIALS, extra=["--grace", "60"], timeout=600,
    )  # fmt: skip


def wait_until_paused(running: RunningCluster, pauses: Mapping[str, list[str]]) -> None:
    """Until every process in ``pauses`` (host: the names of its FIFOs) said it paused (a rank's line may
    come through the master's mpirun)."""
    for names in pauses.values():
        for name in names:
            running.wait_for_line(rf"paused at \S*/pause-{name}$", timeout=RELEASE_SECONDS)


def release(running: RunningCluster, pauses: Mapping[str, list[str]]) -> None:
    """Write to each paused process's FIFO (it is blocked opening it: this open returns at once). Not
    once the job has been stopped: no process reads the FIFOs then, and opening one would block."""
    if running.process.poll() is not None:
        return
    for host, names in pauses.items():
        for name in names:
            with (running.workdir / host / "output" / "data" / f"pause-{name}").open("w") as fifo:
                fifo.write("go")


def inspect(running: RunningCluster, host: str, script: str, user: str = "root") -> str:
    """``script`` run in ``host``'s container by ``user``: a process's /proc/<pid>/fd, maps and environ are
    its own user's to read (root needs CAP_SYS_PTRACE for another user's, which containers do not get)."""
    args = ["exec", "--user", user, running.container(host), "python", "-c", script]
    return DOCKER.run(args, Deadline(60, f"an inspection of {host} as {user}"))


def listening_in(running: RunningCluster, host: str) -> list[dict]:
    """Every port listening in ``host``'s container, each with the process that owns it, looked for as root
    and as the parameter server task's user (the job's two users)."""
    found: dict[tuple[str, int], dict] = {}
    for user in ("root", PS_USER):
        for socket in json.loads(inspect(running, host, LISTENING, user).split("LISTENING ", 1)[1]):
            key = (socket["address"], socket["port"])
            if socket["pid"] is not None or key not in found:
                found[key] = socket
    return list(found.values())


def probe_targets(listening: Mapping[str, list[dict]]) -> list[str]:
    """host:port of every listening port of the job but the master's coordinator (each port once)."""
    return sorted(
        {
            f"{host}:{socket['port']}"
            for host, sockets in listening.items()
            for socket in sockets
            if not (host == "algo-1" and socket["port"] == COORDINATOR_PORT)
        }
    )


def assert_every_port_preloads_but_the_coordinator(listening: Mapping[str, list[dict]]) -> None:
    for host, sockets in listening.items():
        for socket in sockets:
            if host == "algo-1" and socket["port"] == COORDINATOR_PORT:
                assert "sagetrain train" in socket["command"] and not socket["preloaded"], socket
            else:
                assert socket["preloaded"], (host, socket)
    assert any(socket["port"] == COORDINATOR_PORT for socket in listening["algo-1"]), listening


def probed_job(
    tmp_path: Path, image: str, name: str, program: str, hyperparameters: Mapping,
    pauses: Mapping[str, list[str]], grpc: list[str], while_paused=lambda running: None,
):  # fmt: skip
    """Run a job to its pauses, list its ports from inside, let the outsider at them (and ``while_paused``
    look around), release it; (result, listening, attack)."""
    with start_job(tmp_path, image, name, program, hyperparameters) as running:
        try:
            wait_until_paused(running, pauses)
            listening = {host: listening_in(running, host) for host in ("algo-1", "algo-2")}
            targets = probe_targets(listening)
            args = [
                "ports",
                "--targets",
                ",".join(targets),
                "--grpc",
                ",".join(grpc),
                "--seconds",
                str(PROBE_SECONDS),
            ]
            attack = outsider(running, image, tmp_path, "ports", args, 600)
            print(f"listening: {json.dumps(listening)}\noutsider: {json.dumps(attack)}", flush=True)
            while_paused(running)
        finally:
            release(running, pauses)
        return running.wait(), listening, attack


def assert_outsider_got_nowhere(result, listening: Mapping[str, list[dict]], attack: dict) -> None:
    assert result.exit_code == 0, result.describe()
    assert set(result.exit_codes().values()) == {0}, result.describe()
    assert_every_port_preloads_but_the_coordinator(listening)
    assert attack["ports"] and set(attack["ports"].values()) == {"reset"}, (attack, listening)
    assert attack["grpc"] and {ops["outcome"] for ops in attack["grpc"].values()} == {"denied"}, attack
    for host in result.hosts:
        assert not (result.tree(host) / "model" / "outsider-was-here").exists()
    refusals = [
        line for line in result.lines if re.search(r"sagetrain: \S+ \(pid \d+\) refused a connection", line)
    ]
    assert refusals, result.describe()


def test_the_library_takes_members_and_loopback_and_resets_everyone_else(
    docker_client, cpu_image, internal_network
):
    """A server preloading the library, with accept4() (Python's) on one port and accept() (libc's, as
    sshd and Open MPI call it) on another; a member container and an outsider container."""
    server = SERVER
    names = {role: f"sagetrain-test-members-{uuid.uuid4().hex[:8]}-{role}" for role in ("server", "member")}
    run = ["run", "--detach", "--pull", "never", "--label", f"{TEST_LABEL}=1", "--network", internal_network]
    try:
        docker_client.run([
            *run, "--name", names["server"], "--env", f"{PRELOAD_VAR}={MEMBERS_FILTER_LIBRARY}",
            "--env", f"{RUN_DIR_VAR}=/tmp/run", "--entrypoint", "python", cpu_image, "-c", server,
        ])  # fmt: skip
        docker_client.run([*run, "--name", names["member"], "--entrypoint", "sleep", cpu_image, "600"])
        member_address = docker_client.run(
            [
                "inspect",
                "--format",
                "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                names["member"],
            ]
        ).strip()
        wait_for_log(docker_client, names["server"], "listening")

        def probe_from(container: str | None, host: str) -> list[str]:
            command = ["python", "-c", PROBE, host]
            if container is None:  # a container of its own on the network: an outsider
                outsider_run = ["run", "--rm", "--pull", "never", "--label", f"{TEST_LABEL}=1",
                                "--network", internal_network, "--entrypoint", "python", cpu_image,
                                "-c", PROBE, host]  # fmt: skip
                output = docker_client.run(outsider_run, Deadline(120, "the outsider's probe"))
            else:
                output = docker_client.run(["exec", container, *command], Deadline(60, "a probe"))
            return json.loads(output.split("PROBED ", 1)[1])

        def write_members(text: str) -> None:
            new = "/tmp/run/members.new"
            script = f"mkdir -p /tmp/run && printf '{text}' > {new} && mv {new} /tmp/run/members"
            docker_client.run(["exec", names["server"], "sh", "-c", script])

        # No members file yet: loopback alone.
        assert probe_from(names["server"], "127.0.0.1") == ["answered", "answered"]
        assert probe_from(names["member"], names["server"]) == ["reset", "reset"]
        write_members("10.255.0.9\\n")
        assert probe_from(names["member"], names["server"]) == ["reset", "reset"]
        write_members(f"10.255.0.9\\n{member_address}\\nnot-an-address\\n")  # replaced: read again
        assert probe_from(names["member"], names["server"]) == ["answered", "answered"]
        assert probe_from(None, names["server"]) == ["reset", "reset"]
        log = docker_client.logs(names["server"])
        refusals = [line for line in log.splitlines() if "refused a connection" in line]
        assert len(refusals) == 1, log  # the first refusal of the process, once
        assert re.fullmatch(
            rf"sagetrain: python \(pid \d+\) refused a connection from {re.escape(member_address)} to "
            r"port 9000: that address is not one of the job's hosts; further refusals of this process are "
            r"not logged",
            refusals[0],
        ), refusals
    finally:
        for name in names.values():
            docker_client.run(["rm", "--force", name], check=False)


def wait_for_log(docker_client, container: str, text: str) -> None:
    deadline = Deadline(120, f"{container} to say {text!r}")
    with docker_client.start(["logs", "--follow", container], deadline) as follower:
        for line in follower.stdout:
            if text.encode() in line:
                return
    pytest.fail(f"{container} never said {text!r}: {docker_client.logs(container)[-2000:]}")


# Port 9000 takes connections with socket.accept (accept4), port 9001 with libc's accept(); each answers
# "hi" on every connection it is handed.
SERVER = """
import ctypes, socket, threading
libc = ctypes.CDLL(None, use_errno=True)
def serve(port, with_libc_accept):
    listener = socket.socket(socket.AF_INET6)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("::", port))
    listener.listen(64)
    while True:
        if with_libc_accept:
            fd = libc.accept(listener.fileno(), None, None)
            connection = socket.socket(fileno=fd)
        else:
            connection, _ = listener.accept()
        connection.sendall(b"hi")
        connection.close()
threads = [threading.Thread(target=serve, args=(9000 + n, bool(n))) for n in (0, 1)]
for thread in threads:
    thread.start()
print("listening", flush=True)
"""
# A reset may come before connect() returns (with a timeout, Python waits for the connection's outcome).
PROBE = """
import json, socket, sys
outcomes = []
for port in (9000, 9001):
    try:
        with socket.create_connection((sys.argv[1], port), timeout=20) as sock:
            outcomes.append("answered" if sock.recv(2) == b"hi" else "closed")
    except ConnectionResetError:
        outcomes.append("reset")
print("PROBED " + json.dumps(outcomes), flush=True)
"""


def test_an_outsider_is_reset_on_every_port_of_a_horovod_job_which_succeeds(tmp_path, cpu_image):
    hps = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 1}
    pauses = {"algo-1": ["rank-0"], "algo-2": ["rank-1"]}
    result, listening, attack = probed_job(tmp_path, cpu_image, "ports-hvd", "hvd.py", hps, pauses, grpc=[])
    assert_outsider_got_nowhere_but_grpc(result, listening, attack)
    commands = " ".join(socket["command"] for sockets in listening.values() for socket in sockets)
    for listener in ("mpirun", "orted", "sshd"):  # and the ranks' TCP transport
        assert listener in commands, listening
    weights = [path for paths in files_by_host(result, "rank-*-weights.npz").values() for path in paths]
    assert len(weights) == 2, weights
    assert_identical_weights(weights)


def assert_outsider_got_nowhere_but_grpc(result, listening, attack) -> None:
    """As assert_outsider_got_nowhere, for a job with no gRPC task to run ops on."""
    assert_outsider_got_nowhere(result, listening, {**attack, "grpc": {"none": {"outcome": "denied"}}})


MWMS = {"sagemaker_multi_worker_mirrored_strategy_enabled": True}


def test_an_outsider_is_reset_on_every_port_of_a_multi_worker_mirrored_job_which_succeeds(
    tmp_path, cpu_image
):
    pauses = {"algo-1": ["worker-0"], "algo-2": ["worker-1"]}
    grpc = ["algo-1:2222:worker:0", "algo-2:2222:worker:1"]
    result, listening, attack = probed_job(tmp_path, cpu_image, "ports-mwms", "mwms.py", MWMS, pauses, grpc)
    assert_outsider_got_nowhere(result, listening, attack)
    ports = {socket["port"] for sockets in listening.values() for socket in sockets}
    assert 2222 in ports, listening
    weights = files_by_host(result, "worker-*-weights.npz")
    assert_identical_weights([paths[0] for paths in weights.values()])


def test_without_members_only_ports_an_outsider_reads_a_workers_credentials(tmp_path, cpu_image):
    """The control: the same job and outsider with the setting off; the probe and the ops succeed. (The
    outsider's remote context also replaces the worker's own: the job may then crash, which is not what is
    asserted here.)"""
    pauses = {"algo-1": ["worker-0"], "algo-2": ["worker-1"]}
    hps = {**MWMS, "sagetrain_members_only_ports": False}
    result, listening, attack = probed_job(
        tmp_path, cpu_image, "ports-off", "mwms.py", hps, pauses, ["algo-2:2222:worker:1"]
    )
    assert not any(socket["preloaded"] for sockets in listening.values() for socket in sockets), listening
    assert attack["ports"]["algo-2:2222"].startswith("answered"), attack  # gRPC's settings frame
    ops = attack["grpc"]["algo-2:2222:worker:1"]
    assert ops["outcome"] == "ran" and ops["aws_secret"] and ops["wrote"], attack
    assert (result.tree("algo-2") / "model" / "outsider-was-here").is_file()


PS = {"sagemaker_parameter_server_enabled": True}
PS_GRPC = ["algo-1:2222:chief:0", "algo-2:2222:worker:0", "algo-1:2223:ps:0", "algo-2:2223:ps:1"]


def parameter_server_facts(running: RunningCluster, host: str) -> dict:
    """The parameter server task on ``host``, from inside: its uid, groups and environment, and what its
    user can read and write."""
    script = PS_FACTS.replace("PS_MODULE", "sagetrain.launch.ps_server")
    facts = json.loads(inspect(running, host, script, PS_USER).split("FACTS ", 1)[1])
    user = f"{facts['uid']}:{facts['gid']}"
    attempts = {
        "read secret channel": "cat /opt/ml/input/data/secret/job-secret",
        "list secret channel": "ls /opt/ml/input/data/secret",
        "read host key": "cat /run/sagetrain/host.key",
        "read host env": "cat /run/sagetrain/host-env.json",
        "list run folder": "ls /run/sagetrain",
        "write model": "touch /opt/ml/model/ps-was-here",
        "write output": "touch /opt/ml/output/ps-was-here",
        "write code": "touch /opt/ml/code/ps-was-here",
        "read members": "cat /run/sagetrain/members",
        "write scratch": f"touch {facts['environ'].get('HOME', '/nonexistent')}/scratch",
    }
    outcomes = {}
    for what, command in attempts.items():
        done = DOCKER.call(
            ["exec", "--user", user, running.container(host), "sh", "-c", command], Deadline(60, what)
        )
        outcomes[what] = "allowed" if done.returncode == 0 else done.stderr.strip()
    return {**facts, "attempts": outcomes}


PS_FACTS = """
import json, os, pwd
pid = next(int(p) for p in os.listdir("/proc") if p.isdigit()
           and b"PS_MODULE" in open(f"/proc/{p}/cmdline", "rb").read())
status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines())
entries = open(f"/proc/{pid}/environ", "rb").read().decode().split("\\0")
environ = dict(entry.split("=", 1) for entry in entries if entry)
print("FACTS " + json.dumps({"uid": int(status["Uid"].split()[0]), "gid": int(status["Gid"].split()[0]),
      "groups": status["Groups"].split(), "user": pwd.getpwuid(int(status["Uid"].split()[0])).pw_name,
      "environ": environ, "cwd": os.readlink(f"/proc/{pid}/cwd")}))
"""


def test_an_outsider_is_reset_on_every_port_of_a_parameter_server_job_whose_ps_task_holds_nothing(
    tmp_path, cpu_image
):
    pauses = {"algo-1": ["chief"]}
    found: dict[str, dict] = {}

    def look_at_the_parameter_servers(running: RunningCluster) -> None:
        found.update({host: parameter_server_facts(running, host) for host in ("algo-1", "algo-2")})

    result, listening, attack = probed_job(
        tmp_path, cpu_image, "ports-ps", "ps.py", PS, pauses, PS_GRPC, look_at_the_parameter_servers
    )
    assert_outsider_got_nowhere(result, listening, attack)
    ports = {(host, socket["port"]) for host, sockets in listening.items() for socket in sockets}
    assert {("algo-1", 2222), ("algo-1", 2223), ("algo-2", 2222), ("algo-2", 2223)} <= ports, listening
    assert json.loads((result.tree("algo-1") / "model" / "result.json").read_text()) == {
        "steps": 20,
        "weight": 20.0,
    }

    for host, facts in found.items():
        assert facts["user"] == PS_USER and facts["uid"] != 0 and facts["groups"] == [], (host, facts)
        environ = facts["environ"]
        assert not (set(environ) & (AWS_CREDENTIAL_VARS | {SECRET_VAR})), (host, sorted(environ))
        leaked = [value for value in (*CREDENTIALS.values(), SECRET.decode()) if value in json.dumps(environ)]
        assert not leaked, (host, leaked)
        assert environ[PRELOAD_VAR].split()[0] == str(MEMBERS_FILTER_LIBRARY), environ
        attempts = facts["attempts"]
        assert attempts["read members"] == "allowed" and attempts["write scratch"] == "allowed", attempts
        denied = {
            what: outcome
            for what, outcome in attempts.items()
            if what not in ("read members", "write scratch")
        }
        assert all("Permission denied" in outcome for outcome in denied.values()), (host, attempts)
        assert facts["cwd"] == environ["HOME"] == "/run/sagetrain/ps", facts
