"""The coordinator: one TCP server on the master host, one long-lived connection from every other host,
and short connections from rank launchers. Every connection proves membership of the job.

Messages are those of ``messages.py``, one JSON object per line. Each connection starts with the handshake
of ``handshake.py``: a password-authenticated key exchange over the peer host's key (membership.py),
which lets no one test a guess of that key offline. The master drops a peer whose host is not one of
the job's or that does not prove membership: such a peer can neither join, nor report for a rank, nor
end the job, and a worker leaves a master that did not prove itself. From then on every message in
either direction carries a MAC under the connection's session key over its direction and its sequence
number, so no message can be replayed, reordered or forged. A peer's first message is a worker's Hello
(answered Welcome, or Reject and the connection closes; a worker whose host list differs from the
master's also fails the master at once), or a rank launcher's RankStarted or RankFailed on a short
connection of its own, answered Ack (RankStarted comes before the rank launcher starts its program: the
master bounds mpirun's start by it).

No one on the job's network can starve the master: before a peer has proved membership, the master
reads at most ``HANDSHAKE_LINE_BYTES`` per message and gives the whole handshake ``HANDSHAKE_SECONDS``;
it takes on a bounded number of handshakes at once, in all and per peer address, pauses a peer whose
handshakes keep failing (admission.py), and logs the first failure of each peer and a count of the rest.

A rank's report counts for the host that proved itself, and only for a rank the plan puts on that host.
The worker closes its connection after the verdict, which tells the master the verdict arrived. A
connection that ends before the verdict means a host is gone: the master posts the host as LOST, a
worker that the master ended without a verdict. TCP keepalive (about 5 s) catches a peer that vanished
without closing its socket.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import secrets
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sagetrain.deadline import Backoff, Deadline
from sagetrain.errors import PlatformError, UserError
from sagetrain.launch.admission import Admission, HandshakeEnd
from sagetrain.launch.events import EventQueue, HostChanged, HostState, MasterEnded, RankReport
from sagetrain.launch.handshake import HandshakeFailed, MasterSide, PeerSide
from sagetrain.launch.membership import MEMBERSHIP_INPUTS, canonical, mac, verified
from sagetrain.launch.messages import (
    HANDSHAKE_LINE_BYTES,
    MAC_FIELD,
    MAX_MESSAGE_BYTES,
    Ack,
    Hello,
    JobVerdict,
    Message,
    Outcome,
    PakeStart,
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

# accept() errors the next accept can recover from.
_ACCEPT_RETRIES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED})

MAX_CONNECT_BACKOFF_SECONDS = 2.0
# How long a rank launcher keeps trying to deliver its reports (each attempt waits for the master's ack).
RANK_START_REPORT_SECONDS = 30.0
RANK_FAILURE_REPORT_SECONDS = 5.0
# The whole handshake, from the connection's first byte to the peer's first message: a connection that
# says nothing, or says it slowly, holds a place no longer.
HANDSHAKE_SECONDS = 10.0
# When the master's process is out of file descriptors, it waits this long before it accepts again.
ACCEPT_PAUSE_SECONDS = 0.05
MASTER = b"master"
# How much of a peer's own text (a claimed host name, a host list) our log lines and messages quote.
QUOTED_CHARACTERS = 200


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
    must carry a MAC over its direction and sequence number. Sending is safe from several threads; one
    thread reads."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()
        self._send_lock = threading.Lock()
        self._key: bytes | None = None
        self._outgoing, self._incoming = b"", b""
        self._sent = self._received = 0

    def secure(self, key: bytes, *, outgoing: bytes, incoming: bytes) -> None:
        self._key, self._outgoing, self._incoming = key, outgoing, incoming

    def send(self, message: Message) -> None:
        fields = encode(message)
        with self._send_lock:
            if self._key is not None:
                count = str(self._sent).encode()
                fields = {**fields, MAC_FIELD: mac(self._key, self._outgoing, count, canonical(fields))}
                self._sent += 1
            self.sock.sendall(canonical(fields) + b"\n")

    def receive(self, deadline: Deadline | None = None) -> Message | None:
        """The next message; None when the peer closed the connection, it broke, ``deadline`` passed, or
        the peer sent something that is not a message of this job (too long; once secure, without the
        right MAC): an impostor's message is as good as a closed connection. Before the connection is
        secure a message may be at most ``HANDSHAKE_LINE_BYTES`` long."""
        limit = MAX_MESSAGE_BYTES if self._key is not None else HANDSHAKE_LINE_BYTES
        line = self._read_line(limit, deadline)
        if line is None:
            return None
        try:
            fields = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than json can read
            return None
        if not isinstance(fields, dict):
            return None
        if self._key is not None and not self._verified(fields):
            log.warning("dropped a coordinator connection: a message did not carry this job's proof")
            return None
        return decode(fields)

    def _verified(self, fields: dict[str, Any]) -> bool:
        assert self._key is not None
        claimed = str(fields.pop(MAC_FIELD, ""))
        count = str(self._received).encode()
        if not verified(self._key, claimed, self._incoming, count, canonical(fields)):
            return False
        self._received += 1
        return True

    def _read_line(self, limit: int, deadline: Deadline | None) -> bytes | None:
        """One line without its newline, read as it arrives: None past ``limit`` bytes, past
        ``deadline`` (for the whole line, however slowly it comes), or when the connection ends."""
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > limit:
                return None
            try:
                self.sock.settimeout(None if deadline is None else max(deadline.remaining(), 0.001))
                chunk = self.sock.recv(min(65536, limit + 1 - len(self._buffer)))
            except OSError:  # timed out, reset, closed under us
                return None
            if not chunk:
                return None
            self._buffer += chunk
        if end > limit:
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


def authenticate_peer(
    connection: Connection,
    host_keys: Mapping[str, bytes],
    deadline: Deadline,
    may_answer: Callable[[], bool] = lambda: True,
) -> tuple[str, Message]:
    """Master's side of the handshake: (the peer's host, its first message), the connection secure.
    The master answers only when ``may_answer()`` (its answer lets the peer test one guess of a key).
    Raises HandshakeFailed when the peer does not prove membership of the job within ``deadline``."""
    start = connection.receive(deadline)
    if not isinstance(start, PakeStart):
        raise HandshakeFailed("no handshake")
    key = host_keys.get(start.host)
    # A host that is not the job's gets an answer like any other, under a key nobody has: it learns
    # nothing about which hosts are, and fails like a member with the wrong key.
    side = MasterSide(start, secrets.token_bytes(32) if key is None else key)
    if not may_answer():
        raise HandshakeFailed("its address has no guesses left before its pause")
    try:
        connection.send(side.reply)
    except OSError:
        raise HandshakeFailed("the connection broke") from None
    if key is None:
        raise HandshakeFailed(f"claims to be host {quoted(start.host)}, which is not one of this job's")
    session = side.finish(connection.receive(deadline))
    connection.secure(session, outgoing=MASTER, incoming=start.host.encode())
    first = connection.receive(deadline)
    if first is None:
        raise HandshakeFailed(f"host {start.host} proved membership, then sent nothing of ours")
    return start.host, first


def open_authenticated(
    sock: socket.socket, host: str, key: bytes, first: Message, deadline: Deadline
) -> Connection:
    """A member's side of the handshake, then ``first``; the connection, secure. Raises HandshakeFailed
    when the master does not prove membership of the job, OSError when the connection breaks first."""
    connection = Connection(sock)
    side = PeerSide(host, key)
    connection.send(side.start())
    reply = connection.receive(deadline)
    if reply is None:
        raise OSError("the coordinator closed the connection before the handshake")
    proof, session = side.finish(reply)
    connection.send(proof)
    connection.secure(session, outgoing=host.encode(), incoming=MASTER)
    connection.send(first)
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
        admission: Admission | None = None,
    ) -> None:
        """``host_keys``: every host that may connect (workers and their ranks, this host's ranks) and
        the key it proves itself with; ``rank_host(rank)``: the host a rank runs on, None when unknown."""
        self._admission = admission or Admission()
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
        self._closed = threading.Event()
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
        """Take connections until closed; nothing a peer does ends this loop."""
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                sock, address = self._listener.accept()
            except OSError as error:
                if self._closed.is_set() or error.errno not in _ACCEPT_RETRIES:
                    return  # closed under us
                # Out of file descriptors or memory: connections already taken end soon (each
                # handshake has its deadline), and the next accept can succeed.
                self._closed.wait(ACCEPT_PAUSE_SECONDS)
                continue
            self._take(sock, address[0])

    def _take(self, sock: socket.socket, peer: str) -> None:
        if not self._admission.begin(peer):
            with contextlib.suppress(OSError):
                sock.close()
            return
        try:
            _enable_keepalive(sock)
            threading.Thread(target=self._serve, args=(Connection(sock), peer), daemon=True).start()
        except (OSError, RuntimeError):  # RuntimeError: no thread can be started now
            self._admission.end(peer, HandshakeEnd.UNANSWERED)
            with contextlib.suppress(OSError):
                sock.close()

    def _serve(self, connection: Connection, peer: str) -> None:
        deadline = Deadline(HANDSHAKE_SECONDS, f"the handshake of a coordinator connection from {peer}")
        answered = False

        def may_answer() -> bool:
            nonlocal answered
            answered = self._admission.may_answer(peer)
            return answered

        try:
            host, first = authenticate_peer(connection, self._host_keys, deadline, may_answer)
        except Exception as failed:  # whatever a peer sends ends its connection alone, its place given back
            self._refused(peer, failed, answered)
            connection.close()
            return
        self._admission.end(peer, HandshakeEnd.PROVED)
        if isinstance(first, (RankStarted, RankFailed)):
            self._take_rank_report(connection, host, first)
        elif isinstance(first, Hello) and self._admit(connection, host, first):
            self._relay(connection, host)
        else:
            connection.close()

    def _refused(self, peer: str, failed: Exception, answered: bool) -> None:
        if not answered:
            self._admission.end(peer, HandshakeEnd.UNANSWERED)
            return
        if self._admission.end(peer, HandshakeEnd.FAILED):
            # Our own reasons only: a peer's text is never logged as ours.
            reason = failed if isinstance(failed, HandshakeFailed) else "a message the handshake cannot read"
            log.warning(
                "refused a coordinator connection from %s: it did not prove membership of this job (%s); "
                "further refusals of that peer are counted, not logged", peer, reason,
            )  # fmt: skip

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
        try:
            while (message := connection.receive()) is not None:
                if isinstance(message, Ready):
                    self._events.put(HostChanged(host, HostState.READY))
                elif isinstance(message, Outcome):
                    self._events.put(HostChanged(host, HostState.DONE, verdict=message.verdict))
        except Exception:  # a message nothing reads: the connection ends as if closed
            log.warning("dropped host %s's coordinator connection: a message it sent could not be read", host)
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
        self._closed.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        for connection in connections:
            connection.close()
        refused = self._admission.refusals()
        if refused:
            log.warning(
                "the coordinator refused %d connection(s) that did not prove membership of this job, from %s",
                sum(refused.values()), ", ".join(f"{peer} ({n})" for peer, n in sorted(refused.items())),
            )  # fmt: skip

    def send_to(self, host: str, message: Message) -> None:
        """Send ``message`` to a joined host (OSError when its connection broke)."""
        with self._changed:
            connection = self._hosts.get(host)
        if connection is None:
            raise OSError(f"host {host} is not connected")
        connection.send(message)


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
        """Connect, prove membership, say hello, retrying while the master is not up yet or turns the
        connection away unheard (it takes only so many handshakes at once); the master's welcome. Fails at
        once when whoever answers as the master does not prove membership, or refuses this host."""
        first = dataclasses.replace(hello, job_hosts=self._job_hosts)
        backoff = Backoff(deadline, most=MAX_CONNECT_BACKOFF_SECONDS, wait=self._closing.wait)
        while True:
            try:
                answer, connection = self._attempt(first, deadline)
            except HandshakeFailed:
                raise PlatformError(
                    f"master host {self.master} did not accept this host's proof of membership, or did not "
                    f"prove its own: every host of a job needs the same {MEMBERSHIP_INPUTS}"
                ) from None
            except OSError as error:
                # Name not resolving yet and connection refused both mean: the master has not started.
                last_error = f"last attempt: {error.strerror or error}"
            else:
                if isinstance(answer, Reject):
                    connection.close()
                    raise UserError(f"master host {self.master} refused this host: {quoted(answer.reason)}")
                self._connection = connection
                return answer
            if not backoff.pause():
                raise PlatformError(deadline.timeout_message(last_error))

    def _attempt(self, first: Hello, deadline: Deadline) -> tuple[Welcome | Reject, Connection]:
        """One connection: the handshake and the master's answer. OSError for what a retry may cure."""
        sock = socket.create_connection(
            (self.master, self._port), timeout=max(0.1, min(5.0, deadline.remaining()))
        )
        try:
            _enable_keepalive(sock)
            connection = open_authenticated(sock, self._host, self._key, first, deadline)
            answer = connection.receive(deadline)
            if not isinstance(answer, (Welcome, Reject)):
                raise OSError("the master closed the connection without an answer")
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        return answer, connection

    def receive(self, deadline: Deadline) -> Message | None:
        """The master's next message, before ``listen``; None when the connection ended or ``deadline``
        passed."""
        if self._connection is None:
            raise RuntimeError("join() first")
        return self._connection.receive(deadline)

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
                connection = open_authenticated(sock, host, key, report, deadline)
                return isinstance(connection.receive(deadline), Ack)
        except HandshakeFailed:
            return False  # whoever answered is not this job's master: nothing to retry
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
