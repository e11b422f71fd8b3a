"""The master's coordinator server: one TCP server on the master host, one long-lived connection from every
other host, and short connections from rank launchers. Every connection proves membership of the job.

Each connection starts with the handshake (trust.py). The master drops a peer whose host is not one of
the job's or that does not prove membership: such a peer can neither join, nor report for a rank, nor
end the job. A peer's first message is a worker's Hello (answered Welcome, or Reject and the connection
closes; a worker whose host list differs from the master's also fails the master at once), or a rank
launcher's RankStarted or RankFailed on a short connection of its own, answered Ack (RankStarted comes
before the rank launcher starts its program: the master bounds mpirun's start by it).

No one on the job's network can starve the master: before a peer has proved membership, the master
reads at most ``HANDSHAKE_LINE_BYTES`` per message, gives it ``FIRST_MESSAGE_SECONDS`` to start the
handshake and ``HANDSHAKE_SECONDS`` for the whole of it; it takes on a bounded number of handshakes at
once, per peer address and, for addresses that are not the job's own, in all; the job's own addresses
(this host, the addresses the job's hosts resolve to, those that proved membership) keep places of their
own. It pauses a peer whose handshakes keep failing (trust.py: ``Admission``): while the pause lasts, an
outsider's connections are held unread for ``PARK_SECONDS`` (a bounded number of them), so that a client
holding connections open does not open the next at once; a connection turned away for want of a place
is closed at once. It logs the first failure of each peer and a count of the rest.

Mismatched keys: a peer that refuses the master's proof (``PakeRefused``) while claiming one of the job's
worker hosts, from an address that host's name resolves to, is taken for that host with another key (a
worker given another job secret, say): the master fails at once, naming it. The claim rests on name
resolution: on SageMaker the platform resolves the hosts' names, but on a Docker network any container
may take another's alias, and so end the job this way, as it could by answering as the master (which
the worker refuses at once).

A rank's report counts for the host that proved itself, and only for a rank the plan puts on that host.
The worker closes its connection after the verdict, which tells the master the verdict arrived. A
connection that ends before the verdict means a host is gone: the master posts the host as LOST. TCP
keepalive catches a peer that vanished without closing its socket.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from sagetrain.config.job_secret import MEMBERSHIP_INPUTS
from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError
from sagetrain.launch.coordinator import wire
from sagetrain.launch.coordinator.events import EventQueue, HostChanged, HostState, RankReport
from sagetrain.launch.coordinator.trust import (
    Admission,
    HandshakeEnd,
    HandshakeFailed,
    HandshakeMalformed,
    ProofRefused,
    authenticate_peer,
)
from sagetrain.report.verdict import Verdict

log = logging.getLogger(__name__)

# accept() errors the next accept can recover from.
_ACCEPT_RETRIES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED})
# The whole handshake, from the connection's first byte to the peer's first message: a connection that
# says nothing, or says it slowly, holds a place no longer.
HANDSHAKE_SECONDS = 10.0
# Its start: a member sends it as soon as it is connected (its SPAKE2 message takes it milliseconds).
FIRST_MESSAGE_SECONDS = 1.0
# How often, at most, the master looks up the addresses of the job's worker hosts that have not joined yet
# (a host's name may resolve only once its container is up). It looks only when it turns a connection
# away or one fails its handshake: until then every address is heard, and a quiet job makes no lookups.
RESOLVE_SECONDS = 1.0
# When the master's process is out of file descriptors, it waits this long before it accepts again.
ACCEPT_PAUSE_SECONDS = 0.05
# Connections the accept loop has not taken yet wait in the kernel's queue, which the kernel caps at
# net.core.somaxconn (4,096 by default since Linux 5.4): a burst of them (outsiders' connections, a large
# job's rank launchers reporting at once) waits there instead of having the kernel drop a member's.
LISTEN_BACKLOG = 4096
# A paused outsider's connection is held this long before it is closed: its client, holding connections
# open, waits instead of opening the next (closed at once, a flood of 23 addresses on a 2-core machine
# made 1,800 connections a second). At most a quarter of the process's file descriptors (and 1,024) are
# held so; past that, the oldest is closed.
PARK_SECONDS = 5.0
MAX_PARKED = 1024


def resolve_ipv4(host: str) -> frozenset[str]:
    """The IPv4 addresses ``host`` resolves to now; none when it does not (yet)."""
    try:
        found = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset(str(entry[4][0]) for entry in found)


def _resolves_nowhere(host: str) -> frozenset[str]:
    return frozenset()


def keys_differ(host: str, address: str) -> str:
    """The sentence saying a worker host refused the master's proof of membership. Pure."""
    return (
        f"host {host} ({address}) refused this host's proof of membership of the job: their keys differ, so "
        f"the two hosts were not given the same {MEMBERSHIP_INPUTS}; give every host of the job the same"
    )


def host_list_mismatch(host: str, theirs: Sequence[str], ours: Sequence[str]) -> str | None:
    """The sentence saying a joining host's job has other hosts than the master's; None when they
    agree or either side did not say. Pure."""
    if not ours or not theirs or list(theirs) == list(ours):
        return None
    listed = wire.quoted(", ".join(map(str, theirs)))
    return (
        f"host {host}'s resourceconfig.json lists hosts {listed} but the master's lists {', '.join(ours)}; "
        'give every host of the job the same "hosts" list'
    )


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


class _Parked:
    """Connections held unread until their time is up, at most ``most`` (the oldest closed first)."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._held: collections.deque[tuple[float, socket.socket]] = collections.deque()
        self._lock = threading.Lock()

    def park(self, sock: socket.socket, until: float) -> None:
        with self._lock:
            self._held.append((until, sock))
            while len(self._held) > self._most:
                _close(self._held.popleft()[1])

    def release_due(self, now: float) -> float | None:
        """Close those whose time is up; the seconds until the next one's is, None when none is held."""
        with self._lock:
            while self._held and self._held[0][0] <= now:
                _close(self._held.popleft()[1])
            return self._held[0][0] - now if self._held else None

    def close_all(self) -> None:
        with self._lock:
            while self._held:
                _close(self._held.popleft()[1])


def _parking_places() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_PARKED if soft == resource.RLIM_INFINITY else max(0, min(MAX_PARKED, soft // 4))


class CoordinatorServer:
    """The master's server: takes joins and ranks' reports, posts what happens as events, sends the
    verdict."""

    def __init__(
        self,
        events: EventQueue,
        expected_hosts: Iterable[str],
        welcome: Callable[[wire.Hello], wire.Welcome],
        *,
        host_keys: Mapping[str, bytes],
        bind_address: str = "0.0.0.0",
        port: int = 0,
        job_hosts: Sequence[str] = (),
        rank_host: Callable[[int], str | None] = lambda rank: None,
        admission: Admission | None = None,
        catalogue: wire.Catalogue = wire.CORE,
        resolve: Callable[[str], frozenset[str]] = _resolves_nowhere,
    ) -> None:
        """``host_keys``: every host that may connect (workers and their ranks, this host's ranks) and
        the key it proves itself with; ``rank_host(rank)``: the host a rank runs on, None when unknown;
        ``catalogue``: the messages its connections read; ``resolve``: a host name's addresses (how the
        master knows the job's own addresses: none by default)."""
        self._admission = admission or Admission()
        self._resolve = resolve
        self._addresses: dict[str, frozenset[str]] = {}  # a worker host's, as it resolved
        self._joined: set[str] = set()  # worker hosts that joined (and may have left since)
        self._catalogue = catalogue
        self._events = events
        self._expected = set(expected_hosts)
        self._job_hosts = list(job_hosts)
        self._welcome = welcome
        self._host_keys = dict(host_keys)
        self._rank_host = rank_host
        self._bind = (bind_address, port)
        self._listener: socket.socket | None = None
        self._hosts: dict[str, wire.Connection] = {}
        self._verdict_sent = False
        self._closing = False
        self._closed = threading.Event()
        self._changed = threading.Condition()
        self._resolve_wanted = threading.Event()  # a connection was turned away: look the workers up
        self._parked = _Parked(_parking_places())

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
        listener.listen(LISTEN_BACKLOG)
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="coordinator-accept", daemon=True).start()
        threading.Thread(target=self._resolve_loop, name="coordinator-resolve", daemon=True).start()
        return int(listener.getsockname()[1])

    def _resolve_loop(self) -> None:
        """Learn the addresses of the worker hosts that have not joined yet, when a connection was turned
        away or failed its handshake (at most every RESOLVE_SECONDS): a worker refused for want of a place
        gets its own on its next try, and one whose start came late is not paused for it."""
        if self._resolve is _resolves_nowhere:
            return
        while self._resolve_wanted.wait() and not self._closed.is_set():
            self._resolve_wanted.clear()
            with self._changed:
                waiting = sorted(self._expected - self._joined)
            if not waiting:
                return
            for host in waiting:
                self._learn_addresses(host)
            self._closed.wait(RESOLVE_SECONDS)

    def _learn_addresses(self, host: str) -> frozenset[str]:
        """``host``'s addresses now, kept with those it had (Docker and DNS may list several)."""
        found = self._resolve(host)
        with self._changed:
            known = self._addresses[host] = self._addresses.get(host, frozenset()) | found
        self._admission.recognise(found)
        return known

    def _accept_loop(self) -> None:
        """Take connections until closed; nothing a peer does ends this loop."""
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                self._listener.settimeout(self._parked.release_due(time.monotonic()))
                sock, address = self._listener.accept()
            except TimeoutError:
                continue  # a held connection's time is up
            except OSError as error:
                if self._closed.is_set() or error.errno not in _ACCEPT_RETRIES:
                    return  # closed under us
                # Out of file descriptors or memory: connections already taken end soon (each
                # handshake has its deadline), and the next accept can succeed.
                self._closed.wait(ACCEPT_PAUSE_SECONDS)
                continue
            self._take(sock, address[0])

    def _take(self, sock: socket.socket, peer: str) -> None:
        try:
            from_this_host = peer == sock.getsockname()[0]
        except OSError:  # reset already
            from_this_host = False
        if not self._admission.begin(peer, own=from_this_host):
            self._resolve_wanted.set()
            if self._admission.paused_outsider(peer):
                self._parked.park(sock, time.monotonic() + PARK_SECONDS)
            else:
                _close(sock)
            return
        try:
            wire.enable_keepalive(sock)
            connection = wire.Connection(sock, self._catalogue)
            threading.Thread(target=self._serve, args=(connection, peer), daemon=True).start()
        except (OSError, RuntimeError):  # RuntimeError: no thread can be started now
            self._admission.end(peer, HandshakeEnd.UNANSWERED)
            with contextlib.suppress(OSError):
                sock.close()

    def _serve(self, connection: wire.Connection, peer: str) -> None:
        deadline = Deadline(HANDSHAKE_SECONDS, f"the handshake of a coordinator connection from {peer}")
        first_deadline = deadline.part(FIRST_MESSAGE_SECONDS, f"the start of a handshake from {peer}")
        answered = False

        def may_answer() -> bool:
            nonlocal answered
            answered = self._admission.may_answer(peer)
            return answered

        try:
            host, first = authenticate_peer(connection, self._host_keys, deadline, may_answer, first_deadline)
        except Exception as failed:  # whatever a peer sends ends its connection alone, its place given back
            self._refused(peer, failed, answered)
            connection.close()
            return
        self._admission.end(peer, HandshakeEnd.PROVED)
        if isinstance(first, (wire.RankStarted, wire.RankFailed)):
            self._take_rank_report(connection, host, first)
        elif isinstance(first, wire.Hello) and self._admit(connection, host, first):
            self._relay(connection, host)
        else:
            connection.close()

    def _refused(self, peer: str, failed: Exception, answered: bool) -> None:
        if answered:
            outcome = HandshakeEnd.FAILED
        elif isinstance(failed, HandshakeMalformed):
            outcome = HandshakeEnd.MALFORMED
        else:
            outcome = HandshakeEnd.UNANSWERED
        first = self._admission.end(peer, outcome)
        if outcome is HandshakeEnd.UNANSWERED:
            return
        self._resolve_wanted.set()  # a worker's address not known yet is not paused for a slow start
        if isinstance(failed, ProofRefused) and self._is_address_of(failed.host, peer):
            differ = keys_differ(failed.host, peer)
            log.error("%s", differ)
            self._events.put(HostChanged(failed.host, HostState.REJECTED, reason=differ))
        elif first:
            # Our own reasons only: a peer's text is never logged as ours.
            reason = failed if isinstance(failed, HandshakeFailed) else "a message the handshake cannot read"
            log.warning(
                "refused a coordinator connection from %s: it did not prove membership of this job (%s); "
                "further refusals of that peer are counted, not logged", peer, reason,
            )  # fmt: skip

    def _is_address_of(self, host: str, peer: str) -> bool:
        """Whether ``peer`` is an address of ``host``, a worker host that has not joined."""
        with self._changed:
            if host not in self._expected or host in self._joined:
                return False
            known = self._addresses.get(host, frozenset())
        return peer in known or peer in self._learn_addresses(host)

    def _take_rank_report(
        self, connection: wire.Connection, host: str, report: wire.RankStarted | wire.RankFailed
    ) -> None:
        """A rank launcher's report on its own short connection, acknowledged so it precedes its exit;
        it counts for ``host`` (which proved itself) and only for a rank the plan puts there."""
        failure = report.failure if isinstance(report, wire.RankFailed) else None
        if self._rank_host(report.rank) not in (None, host):
            log.warning("ignored host %s's report about rank %d, which does not run there", host, report.rank)
        else:
            self._events.put(RankReport(report.rank, host, failure))
            with contextlib.suppress(OSError):
                connection.send(wire.Ack())
        connection.close()

    def _admit(self, connection: wire.Connection, host: str, hello: wire.Hello) -> bool:
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
                self._joined.add(host)
        if problem:
            with contextlib.suppress(OSError):
                connection.send(wire.Reject(problem))
            connection.close()
            log.warning("rejected a coordinator connection: %s", problem)
            if mismatch:
                self._events.put(HostChanged(host, HostState.REJECTED, reason=mismatch))
            return False
        self._events.put(HostChanged(host, HostState.JOINED, hello=hello))
        with contextlib.suppress(OSError):  # a broken connection is seen as a lost host below
            connection.send(self._welcome(hello))
        return True

    def _relay(self, connection: wire.Connection, host: str) -> None:
        """A joined host's messages as events, until its connection ends (LOST before the verdict)."""
        try:
            while (message := connection.receive()) is not None:
                if isinstance(message, wire.Ready):
                    self._events.put(HostChanged(host, HostState.READY))
                elif isinstance(message, wire.Outcome):
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
                connection.send(wire.JobVerdict(verdict))
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
        self._resolve_wanted.set()  # the resolving thread ends
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        self._parked.close_all()
        for connection in connections:
            connection.close()
        refused = self._admission.refusals()
        if refused:
            log.warning(
                "the coordinator refused %d connection(s) that did not prove membership of this job, from %s",
                sum(refused.values()), ", ".join(f"{peer} ({n})" for peer, n in sorted(refused.items())),
            )  # fmt: skip

    def member_addresses(self) -> tuple[str, ...]:
        """The address every joined host proved membership from, and this host's own as each reached it
        (the local end of its connection); sorted, each once."""
        with self._changed:
            connections = list(self._hosts.values())
        addresses: set[str] = set()
        for connection in connections:
            with contextlib.suppress(OSError):  # a connection that broke: its host is seen as lost
                addresses.update((connection.sock.getpeername()[0], connection.sock.getsockname()[0]))
        return tuple(sorted(addresses))

    def send_to(self, host: str, message: wire.WireMessage) -> None:
        """Send ``message`` to a joined host (OSError when its connection broke)."""
        with self._changed:
            connection = self._hosts.get(host)
        if connection is None:
            raise OSError(f"host {host} is not connected")
        connection.send(message)
