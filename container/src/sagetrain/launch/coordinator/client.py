"""The other side of the master's coordinator: a worker host's connection (join, then the verdict or the
master's loss) and a rank launcher's reports (short connections, each acknowledged). Both prove
membership first (trust.py) and leave a master that does not prove its own.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Sequence

from sagetrain.config.job_secret import MEMBERSHIP_INPUTS
from sagetrain.deadline import Backoff, Deadline
from sagetrain.errors import PlatformError, UserError
from sagetrain.launch.coordinator import wire
from sagetrain.launch.coordinator.events import EventQueue, MasterEnded
from sagetrain.launch.coordinator.trust import HandshakeFailed, PeerSide, open_authenticated
from sagetrain.report.verdict import RankFailure

MAX_CONNECT_BACKOFF_SECONDS = 2.0
# How long a rank launcher keeps trying to deliver its reports (each attempt waits for the master's ack).
RANK_START_REPORT_SECONDS = 30.0
RANK_FAILURE_REPORT_SECONDS = 5.0


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
        catalogue: wire.Catalogue = wire.CORE,
    ) -> None:
        self._events = events
        self._catalogue = catalogue
        self.master = master
        self._port = port
        self._host = host
        self._key = host_key
        self._job_hosts = tuple(job_hosts)
        self._connection: wire.Connection | None = None
        self._closing = threading.Event()

    def join(self, hello: wire.Hello, deadline: Deadline) -> wire.Welcome:
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
                if isinstance(answer, wire.Reject):
                    connection.close()
                    raise UserError(
                        f"master host {self.master} refused this host: {wire.quoted(answer.reason)}"
                    )
                self._connection = connection
                return answer
            if not backoff.pause():
                raise PlatformError(deadline.timeout_message(last_error))

    def _attempt(
        self, first: wire.Hello, deadline: Deadline
    ) -> tuple[wire.Welcome | wire.Reject, wire.Connection]:
        """One connection: the handshake and the master's answer. OSError for what a retry may cure."""
        side = PeerSide(self._host, self._key)
        sock = socket.create_connection(
            (self.master, self._port), timeout=max(0.1, min(5.0, deadline.remaining()))
        )
        try:
            wire.enable_keepalive(sock)
            connection = open_authenticated(
                sock, self._host, self._key, first, deadline, self._catalogue, side=side
            )
            answer = connection.receive(deadline)
            if not isinstance(answer, (wire.Welcome, wire.Reject)):
                raise OSError("the master closed the connection without an answer")
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        return answer, connection

    def receive(self, deadline: Deadline) -> wire.WireMessage | None:
        """The master's next message, before ``listen``; None when the connection ended or ``deadline``
        passed."""
        if self._connection is None:
            raise RuntimeError("join() first")
        return self._connection.receive(deadline)

    def send(self, message: wire.WireMessage) -> None:
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
                if isinstance(message, wire.JobVerdict):
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
    address: tuple[str, int],
    host: str,
    key: bytes,
    report: wire.RankStarted | wire.RankFailed,
    deadline: Deadline,
) -> bool:
    """Send a rank's report to the master, proving it comes from ``host``, and wait for its ack (so the
    report precedes what follows). Retried with a growing pause while the master's port does not
    answer (its accept queue may be full when many ranks start at once), until ``deadline``; False if it
    never acknowledged."""
    backoff = Backoff(deadline, most=MAX_CONNECT_BACKOFF_SECONDS)
    while True:
        try:
            side = PeerSide(host, key)
            with socket.create_connection(address, timeout=max(0.1, min(5.0, deadline.remaining()))) as sock:
                connection = open_authenticated(sock, host, key, report, deadline, side=side)
                return isinstance(connection.receive(deadline), wire.Ack)
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
    return send_rank_report(address, failure.host, key, wire.RankFailed(failure), deadline)


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
    return send_rank_report(address, rank_host, key, wire.RankStarted(rank), deadline)
