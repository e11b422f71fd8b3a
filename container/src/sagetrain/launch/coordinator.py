"""The coordinator: one TCP server on the master host, one long-lived connection from every other host,
and short connections from rank launchers. Every connection proves membership of the job (membership.py).

Messages are those of ``messages.py``, one JSON object per line. Each connection starts with a handshake:

    master → peer     Challenge(Ns)
    peer   → master   its first message, with host h, nonce Nc and mac HMAC(key of h, Ns, message)

The master drops, without answering, a peer whose host is not one of the job's or whose MAC is wrong: such
a peer can neither join, nor report for a rank, nor end the job. From then on every message in either
direction carries a MAC under a key of this connection (from h's key and both nonces) over its direction
and its sequence number, so the peer also knows the master is a member, and no message can be replayed,
reordered or forged. A first message is a worker's Hello (answered Welcome, or Reject and the connection
closes; a worker whose host list differs from the master's also fails the master at once), or a rank
launcher's RankStarted or RankFailed on a short connection of its own, answered Ack (RankStarted comes
before the rank launcher starts its program: the master bounds mpirun's start by it).

A rank's report counts for the host that proved itself, and only for a rank the plan puts on that host.
The worker closes its connection after the verdict, which tells the master the verdict arrived. A
connection that ends before the verdict means a host is gone: the master posts the host as LOST, a
worker that the master ended without a verdict. TCP keepalive (about 5 s) catches a peer that vanished
without closing its socket.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sagetrain.deadline import Backoff, Deadline
from sagetrain.errors import PlatformError, UserError
from sagetrain.launch.events import EventQueue, HostChanged, HostState, MasterEnded, RankReport
from sagetrain.launch.membership import SECRET_VAR, canonical, mac, new_nonce, session_key, verified
from sagetrain.launch.messages import (
    HOST_FIELD,
    MAC_FIELD,
    MAX_MESSAGE_BYTES,
    NONCE_FIELD,
    Ack,
    Challenge,
    Hello,
    JobVerdict,
    Message,
    Outcome,
    RankFailed,
    RankStarted,
    Ready,
    Reject,
    Welcome,
    decode,
    encode,
)
from sagetrain.report.verdict import RankFailure, Verdict

log = logging.getLogger(__name__)

MAX_CONNECT_BACKOFF_SECONDS = 2.0
# How long a rank launcher keeps trying to deliver its reports (each attempt waits for the master's ack).
RANK_START_REPORT_SECONDS = 30.0
RANK_FAILURE_REPORT_SECONDS = 5.0
# A peer has this long to answer the challenge: a connection that says nothing holds no thread longer.
HANDSHAKE_SECONDS = 10.0
# How much of a peer's own text (a claimed host name, a host list) our log lines and messages quote.
QUOTED_CHARACTERS = 200
MASTER = b"master"


def quoted(value: Any) -> str:
    """A peer's text as our lines show it: in quotes, on one line, cut short, so it cannot pass for
    our own words or forge a line of the log."""
    text = value if isinstance(value, str) else repr(value)
    text = "".join(character if character.isprintable() else " " for character in text)
    return '"' + (text if len(text) <= QUOTED_CHARACTERS else text[:QUOTED_CHARACTERS] + "…") + '"'


def _enable_keepalive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


class Connection:
    """A socket carrying messages, one JSON object per line; once ``secure``, every message carries and
    must carry a MAC over its direction and sequence number. Sending is safe from several threads."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = sock.makefile("rb")
        self._send_lock = threading.Lock()
        self._key: bytes | None = None
        self._outgoing, self._incoming = b"", b""
        self._sent = self._received = 0

    def secure(self, key: bytes, *, outgoing: bytes, incoming: bytes) -> None:
        self._key, self._outgoing, self._incoming = key, outgoing, incoming

    def send(self, message: Message) -> None:
        self.send_fields(encode(message))

    def send_fields(self, fields: dict[str, Any]) -> None:
        """A message as its JSON fields (the handshake adds its own to a first message)."""
        with self._send_lock:
            if self._key is not None:
                count = str(self._sent).encode()
                fields = {**fields, MAC_FIELD: mac(self._key, self._outgoing, count, canonical(fields))}
                self._sent += 1
            self.sock.sendall(canonical(fields) + b"\n")

    def receive(self) -> Message | None:
        """The next message; None when the peer closed the connection, it broke, or it sent something that
        is not a message of this job (once secure, one without the right MAC): an impostor's message is as
        good as a closed connection."""
        fields = self.receive_fields()
        return decode(fields) if fields is not None else None

    def receive_fields(self) -> dict[str, Any] | None:
        """The next message's JSON fields (checked as ``receive`` says, but not decoded)."""
        try:
            line = self._reader.readline(MAX_MESSAGE_BYTES)
        except (OSError, ValueError):
            return None
        if not line.endswith(b"\n"):
            return None
        try:
            fields = json.loads(line)
        except ValueError:
            return None
        if not isinstance(fields, dict):
            return None
        if self._key is None:
            return fields
        claimed = str(fields.pop(MAC_FIELD, ""))
        count = str(self._received).encode()
        if not verified(self._key, claimed, self._incoming, count, canonical(fields)):
            log.warning("dropped a coordinator connection: a message did not carry this job's proof")
            return None
        self._received += 1
        return fields

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._reader.close()
            self.sock.close()


def authenticate_peer(
    connection: Connection, host_keys: Mapping[str, bytes], peer: str
) -> tuple[str, Message] | None:
    """Master's side of the handshake: (the peer's host, its first message), the connection secure; None
    (logged, the peer's text quoted) when the peer does not prove membership of the job."""
    nonce = new_nonce()
    try:
        connection.sock.settimeout(HANDSHAKE_SECONDS)
        connection.send(Challenge(nonce))
        first = connection.receive_fields()
        connection.sock.settimeout(None)
    except OSError:
        return None
    if first is None:
        return None
    host, client_nonce = first.get(HOST_FIELD), first.get(NONCE_FIELD)
    proof = str(first.pop(MAC_FIELD, ""))
    if not isinstance(host, str) or not isinstance(client_nonce, str) or host not in host_keys:
        _refused(peer, host)
        return None
    key = host_keys[host]
    if not verified(key, proof, b"hello", nonce.encode(), canonical(first)):
        _refused(peer, host)
        return None
    connection.secure(session_key(key, nonce, client_nonce), outgoing=MASTER, incoming=host.encode())
    message = decode(first)
    if message is None:
        log.warning("dropped a coordinator connection from host %s: its first message is not ours", host)
        return None
    return host, message


def _refused(peer: str, host: object) -> None:
    log.warning(
        "refused a coordinator connection from %s claiming to be host %s: it did not prove membership of "
        "this job", peer, quoted(host),
    )  # fmt: skip


def open_authenticated(sock: socket.socket, host: str, key: bytes, first: Message) -> Connection:
    """A member's side of the handshake: answer the challenge with ``first``; the connection, secure."""
    connection = Connection(sock)
    challenge = connection.receive()
    if not isinstance(challenge, Challenge):
        raise OSError("the coordinator did not send its challenge")
    client_nonce = new_nonce()
    fields = {**encode(first), HOST_FIELD: host, NONCE_FIELD: client_nonce}
    proof = mac(key, b"hello", challenge.nonce.encode(), canonical(fields))
    connection.send_fields({**fields, MAC_FIELD: proof})
    connection.secure(
        session_key(key, challenge.nonce, client_nonce), outgoing=host.encode(), incoming=MASTER
    )
    return connection


def host_list_mismatch(host: str, theirs: Sequence[str], ours: Sequence[str]) -> str | None:
    """The sentence saying a joining host's job has other hosts than the master's; None when they
    agree or either side did not say. Pure."""
    if not ours or not theirs or list(theirs) == list(ours):
        return None
    listed = quoted(", ".join(map(str, theirs)))
    return (
        f"host {host}'s resourceconfig.json lists hosts {listed} but the master's lists {', '.join(ours)}; "
        'give every host of the job the same "hosts" list'
    )


class CoordinatorServer:
    def __init__(
        self,
        events: EventQueue,
        expected_hosts: Iterable[str],
        welcome: Callable[[Hello], Welcome],
        *,
        host_keys: Mapping[str, bytes],
        bind_address: str = "0.0.0.0",
        port: int = 0,
        job_hosts: Sequence[str] = (),
        rank_host: Callable[[int], str | None] = lambda rank: None,
    ) -> None:
        """``host_keys``: every host that may connect (workers and their ranks, this host's ranks) and
        the key it proves itself with; ``rank_host(rank)``: the host a rank runs on, None when unknown."""
        self._events = events
        self._expected = set(expected_hosts)
        self._job_hosts = list(job_hosts)
        self._welcome = welcome
        self._host_keys = dict(host_keys)
        self._rank_host = rank_host
        self._bind = (bind_address, port)
        self._listener: socket.socket | None = None
        self._hosts: dict[str, Connection] = {}
        self._verdict_sent = False
        self._closing = False
        self._changed = threading.Condition()

    def start(self) -> int:
        """Listen; returns the bound port."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(self._bind)
        except OSError as error:
            listener.close()
            raise PlatformError(
                f"the coordinator cannot listen on port {self._bind[1]} ({error.strerror}); "
                "choose another with the hyperparameter sagetrain_coordinator_port"
            ) from None
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="coordinator-accept", daemon=True).start()
        return int(listener.getsockname()[1])

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, address = self._listener.accept()
            except OSError:
                return  # closed
            _enable_keepalive(sock)
            peer = f"{address[0]}:{address[1]}"
            threading.Thread(target=self._serve, args=(Connection(sock), peer), daemon=True).start()

    def _serve(self, connection: Connection, peer: str) -> None:
        authenticated = authenticate_peer(connection, self._host_keys, peer)
        if authenticated is None:
            connection.close()
            return
        host, first = authenticated
        if isinstance(first, (RankStarted, RankFailed)):
            self._take_rank_report(connection, host, first)
        elif isinstance(first, Hello) and self._admit(connection, host, first):
            self._relay(connection, host)
        else:
            connection.close()

    def _take_rank_report(self, connection: Connection, host: str, report: RankStarted | RankFailed) -> None:
        """A rank launcher's report on its own short connection, acknowledged so it precedes its exit;
        it counts for ``host`` (which proved itself) and only for a rank the plan puts there."""
        failure = report.failure if isinstance(report, RankFailed) else None
        if self._rank_host(report.rank) not in (None, host):
            log.warning("ignored host %s's report about rank %d, which does not run there", host, report.rank)
        else:
            self._events.put(RankReport(report.rank, host, failure))
            with contextlib.suppress(OSError):
                connection.send(Ack())
        connection.close()

    def _admit(self, connection: Connection, host: str, hello: Hello) -> bool:
        """Accept a joining host, or reject it saying why; whether it was accepted."""
        mismatch = host_list_mismatch(host, hello.job_hosts, self._job_hosts)
        with self._changed:
            if mismatch:
                problem: str | None = mismatch
            elif host not in self._expected:
                problem = f"host {host} is not one of this job's worker hosts {sorted(self._expected)}"
            elif host in self._hosts:
                problem = f"host {host} joined twice"
            else:
                problem = None
                self._hosts[host] = connection
        if problem:
            with contextlib.suppress(OSError):
                connection.send(Reject(problem))
            connection.close()
            log.warning("rejected a coordinator connection: %s", problem)
            if mismatch:
                self._events.put(HostChanged(host, HostState.REJECTED, reason=mismatch))
            return False
        self._events.put(HostChanged(host, HostState.JOINED, hello=hello))
        with contextlib.suppress(OSError):  # a broken connection is seen as a lost host below
            connection.send(self._welcome(hello))
        return True

    def _relay(self, connection: Connection, host: str) -> None:
        """A joined host's messages as events, until its connection ends (LOST before the verdict)."""
        while (message := connection.receive()) is not None:
            if isinstance(message, Ready):
                self._events.put(HostChanged(host, HostState.READY))
            elif isinstance(message, Outcome):
                self._events.put(HostChanged(host, HostState.DONE, verdict=message.verdict))
        with self._changed:
            self._hosts.pop(host, None)
            lost = not (self._verdict_sent or self._closing)
            self._changed.notify_all()
        connection.close()
        if lost:
            reason = "its connection to the coordinator closed"
            self._events.put(HostChanged(host, HostState.LOST, reason=reason))

    def broadcast(self, verdict: Verdict) -> None:
        with self._changed:
            self._verdict_sent = True
            connections = dict(self._hosts)
        for host, connection in connections.items():
            try:
                connection.send(JobVerdict(verdict))
            except OSError:
                log.warning("could not send the verdict to %s", host)

    def wait_until_disconnected(self, deadline: Deadline) -> list[str]:
        """Wait for every host to close its connection (it has the verdict); the hosts still connected."""
        with self._changed:
            self._changed.wait_for(lambda: not self._hosts, timeout=deadline.remaining())
            return sorted(self._hosts)

    def close(self) -> None:
        with self._changed:
            self._closing = True
            connections = list(self._hosts.values())
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        for connection in connections:
            connection.close()


class CoordinatorClient:
    """A non-master host's side: join the master, then listen for the verdict."""

    def __init__(
        self,
        events: EventQueue,
        master: str,
        port: int,
        host: str,
        host_key: bytes,
        job_hosts: Sequence[str] = (),
    ) -> None:
        self._events = events
        self.master = master
        self._port = port
        self._host = host
        self._key = host_key
        self._job_hosts = tuple(job_hosts)
        self._connection: Connection | None = None
        self._closing = threading.Event()

    def join(self, hello: Hello, deadline: Deadline) -> Welcome:
        """Connect (retrying while the master is not up yet), prove membership, say hello; the master's
        welcome, which proves the master's membership in turn."""
        backoff = Backoff(deadline, most=MAX_CONNECT_BACKOFF_SECONDS, wait=self._closing.wait)
        last_error = "no attempt yet"
        while True:
            try:
                sock = socket.create_connection(
                    (self.master, self._port), timeout=max(0.1, min(5.0, deadline.remaining()))
                )
                break
            except OSError as error:
                # Name not resolving yet and connection refused both mean: the master has not started.
                last_error = f"last attempt: {error.strerror or error}"
            if not backoff.pause():
                raise PlatformError(deadline.timeout_message(last_error))
        sock.settimeout(max(1.0, deadline.remaining()))
        _enable_keepalive(sock)
        try:
            first = dataclasses.replace(hello, job_hosts=self._job_hosts)
            connection = open_authenticated(sock, self._host, self._key, first)
        except OSError as error:
            raise PlatformError(
                f"lost contact with master host {self.master} while joining ({error})"
            ) from None
        answer = connection.receive()
        if isinstance(answer, Reject):
            raise UserError(f"master host {self.master} refused this host: {quoted(answer.reason)}")
        if not isinstance(answer, Welcome):
            connection.close()
            raise PlatformError(
                f"master host {self.master} did not accept this host's proof of membership, or did not prove "
                "its own: every host of a job needs the same hyperparameters.json, inputdataconfig.json and "
                f"{SECRET_VAR}"
            )
        sock.settimeout(None)
        self._connection = connection
        return answer

    def send(self, message: Message) -> None:
        if self._connection is None:
            raise RuntimeError("join() first")
        try:
            self._connection.send(message)
        except OSError as error:
            self._events.put(MasterEnded(None, str(error)))

    def listen(self) -> None:
        """Post ``MasterEnded`` (the master's verdict, or the lost connection) from a reader thread."""
        connection = self._connection
        if connection is None:
            raise RuntimeError("join() first")

        def read() -> None:
            while (message := connection.receive()) is not None:
                if isinstance(message, JobVerdict):
                    self._events.put(MasterEnded(message.verdict))
                    return
            if not self._closing.is_set():
                self._events.put(MasterEnded(None, "the connection closed"))

        threading.Thread(target=read, name="coordinator-client", daemon=True).start()

    def close(self) -> None:
        self._closing.set()
        if self._connection is not None:
            self._connection.close()


def send_rank_report(
    address: tuple[str, int], host: str, key: bytes, report: RankStarted | RankFailed, deadline: Deadline
) -> bool:
    """Send a rank's report to the master, proving it comes from ``host``, and wait for its ack (so the
    report precedes what follows). Retried with a growing pause while the master's port does not
    answer (its accept queue may be full when many ranks start at once), until ``deadline``; False if it
    never acknowledged."""
    backoff = Backoff(deadline, most=MAX_CONNECT_BACKOFF_SECONDS)
    while True:
        try:
            with socket.create_connection(address, timeout=max(0.1, min(5.0, deadline.remaining()))) as sock:
                connection = open_authenticated(sock, host, key, report)
                return isinstance(connection.receive(), Ack)
        except OSError:
            pass
        if not backoff.pause():
            return False


def send_rank_failure(
    address: tuple[str, int], key: bytes, failure: RankFailure, seconds: float = RANK_FAILURE_REPORT_SECONDS
) -> bool:
    """Report a failed rank to the master and wait for its ack (so the report precedes the exit)."""
    deadline = Deadline(seconds, "the master to take this rank's failure report")
    return send_rank_report(address, failure.host, key, RankFailed(failure), deadline)


def send_rank_started(
    address: tuple[str, int],
    key: bytes,
    rank: int,
    rank_host: str,
    seconds: float = RANK_START_REPORT_SECONDS,
) -> bool:
    """Tell the master that rank ``rank`` on ``rank_host`` is starting its program: the master ends the
    job when a rank has not said so within sagetrain_launch_wait_seconds, so a lost report costs a
    healthy job; worth a few retries."""
    deadline = Deadline(seconds, "the master to take this rank's start report")
    return send_rank_report(address, rank_host, key, RankStarted(rank), deadline)
