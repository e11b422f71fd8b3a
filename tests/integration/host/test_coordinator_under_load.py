"""The master's coordinator against many outsider addresses at once, and against a worker whose key differs,
over real loopback sockets: every address of 127/8 is this machine's, so each outsider connects from an
address of its own (127.0.0.2 …), as containers on a job's network do, and the real worker from the one
its host name resolves to (the test's resolver says algo-2 is 127.0.0.50)."""

import contextlib
import logging
import selectors
import socket
import threading
from collections.abc import Iterator

import pytest
from sagetrain.config.job_secret import Membership
from sagetrain.contracts import canonical_json
from sagetrain.deadline import Backoff, Deadline
from sagetrain.errors import PlatformError, UserError
from sagetrain.launch.coordinator import EventQueue, HostChanged, HostState, Welcome
from sagetrain.launch.coordinator import trust as trust_module
from sagetrain.launch.coordinator.client import MAX_CONNECT_BACKOFF_SECONDS, CoordinatorClient
from sagetrain.launch.coordinator.events import wait_for_hosts
from sagetrain.launch.coordinator.server import PARK_SECONDS, CoordinatorServer
from sagetrain.launch.coordinator.trust import (
    FAILURES_BEFORE_PAUSE,
    MAX_HANDSHAKES,
    PeerSide,
    open_authenticated,
)
from sagetrain.launch.coordinator.wire import Hello, PakeStart, encode

pytestmark = pytest.mark.timeout(120)

JOB = Membership(b"k" * 32)
OTHER_SECRET = Membership(b"o" * 32)  # the same host given another job secret
KEYS = {host: JOB.host_key(host) for host in ("algo-1", "algo-2")}
WORKER_ADDRESS = "127.0.0.50"
SILENT_ADDRESSES = [f"127.0.0.{index}" for index in range(2, 22)]  # 20 addresses
MALFORMED_ADDRESSES = ["127.0.0.31", "127.0.0.32", "127.0.0.33"]
CONNECTIONS_PER_ADDRESS = 32
# A SPAKE2 start with a wrong side byte: well-formed JSON and base64, no peer's message.
WRONG_SIDE = canonical_json(encode(PakeStart("algo-2", "WA" + "A" * 42))) + b"\n"


def resolve(host: str) -> frozenset[str]:
    return frozenset({WORKER_ADDRESS}) if host == "algo-2" else frozenset()


@pytest.fixture
def master() -> Iterator[tuple[EventQueue, CoordinatorServer, int]]:
    events = EventQueue()
    server = CoordinatorServer(
        events, ["algo-2"], lambda hello: Welcome(), host_keys=KEYS, bind_address="127.0.0.1", resolve=resolve
    )
    port = server.start()
    yield events, server, port
    server.close()


def connected_from(address: str, port: int, timeout: float) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(address, 0))


def join_from(address: str, port: int, key: bytes) -> Welcome:
    """algo-2's join from ``address``, retried as a worker's client retries it (the master turns a
    connection away unheard when it has no place for it; it looks up the workers' addresses then)."""
    deadline = Deadline(30, "the master to take algo-2's join")
    backoff = Backoff(deadline, most=MAX_CONNECT_BACKOFF_SECONDS)
    while True:
        try:
            with connected_from(address, port, 10) as sock:
                connection = open_authenticated(sock, "algo-2", key, Hello(), deadline)
                answer = connection.receive(deadline)
            assert isinstance(answer, Welcome), answer
            return answer
        except OSError as error:
            if not backoff.pause():
                raise AssertionError(deadline.timeout_message(str(error))) from None


class Flood:
    """Outsiders until stopped: each malformed address sends wrong-side SPAKE2 starts, one connection after
    another, and once each has sent a few, each silent address holds its connections open (a new one for
    each the master closes). Counts the starts sent and what the master answered to them."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stopped = threading.Event()
        self.started = threading.Semaphore(0)  # released by each malformed address at its third start
        self.filled = threading.Semaphore(0)  # released by each silent address when it first held all
        self.lock = threading.Lock()
        self.answered = 0  # bytes the master sent to a malformed start
        self.starts_sent = 0
        self.malformed = [threading.Thread(target=self._malformed, args=(a,)) for a in MALFORMED_ADDRESSES]
        self.silent = [threading.Thread(target=self._hold, args=(a,)) for a in SILENT_ADDRESSES]

    def __enter__(self) -> "Flood":
        for thread in self.malformed:
            thread.start()
        assert all(self.started.acquire(timeout=30) for _ in MALFORMED_ADDRESSES), "the malformed starts"
        for thread in self.silent:
            thread.start()
        assert all(self.filled.acquire(timeout=30) for _ in SILENT_ADDRESSES), "the silent flood to fill"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        for thread in self.malformed + self.silent:
            thread.join(30)

    def _hold(self, address: str) -> None:
        held = selectors.DefaultSelector()
        filled = False
        while not self.stopped.is_set():
            while len(held.get_map()) < CONNECTIONS_PER_ADDRESS and not self.stopped.is_set():
                try:
                    held.register(connected_from(address, self.port, 0.2), selectors.EVENT_READ)
                except OSError:
                    break
            if not filled and len(held.get_map()) == CONNECTIONS_PER_ADDRESS:
                filled = True
                self.filled.release()
            for key, _ in held.select(0.2):  # closed by the master: open another
                held.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
        for key in list(held.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]

    def _malformed(self, address: str) -> None:
        sent = 0
        while not self.stopped.is_set():
            with contextlib.suppress(OSError), connected_from(address, self.port, 0.2) as sock:
                sock.sendall(WRONG_SIDE)
                sock.settimeout(5)
                while data := sock.recv(4096):
                    with self.lock:
                        self.answered += len(data)
                sent += 1
                with self.lock:
                    self.starts_sent += 1
                if sent == FAILURES_BEFORE_PAUSE:
                    self.started.release()


def test_twenty_addresses_of_silent_connections_and_malformed_starts_do_not_keep_the_worker_out(
    master, monkeypatch, caplog
):
    events, server, port = master
    spake2_work: list[str] = []
    original = trust_module.MasterSide

    class CountedMasterSide(original):  # type: ignore[misc, valid-type]
        def __init__(self, start: PakeStart, host_key: bytes) -> None:
            spake2_work.append(start.host)
            super().__init__(start, host_key)

    monkeypatch.setattr(trust_module, "MasterSide", CountedMasterSide)
    caplog.set_level(logging.INFO, logger="sagetrain.launch.coordinator")
    # Far more connections than the places outsiders share: the worker's address keeps its own.
    assert len(SILENT_ADDRESSES) * CONNECTIONS_PER_ADDRESS > MAX_HANDSHAKES
    with Flood(port) as flood:
        assert join_from(WORKER_ADDRESS, port, KEYS["algo-2"]) == Welcome()
        joined = events.get(Deadline(10, "algo-2's join"))
        assert isinstance(joined, HostChanged) and joined.state is HostState.JOINED, joined
    # The malformed starts were never answered and cost no SPAKE2 work: the worker's alone did.
    assert flood.starts_sent >= len(MALFORMED_ADDRESSES) * FAILURES_BEFORE_PAUSE, flood.starts_sent
    assert flood.answered == 0 and spake2_work == ["algo-2"]
    server.close()
    lines = [record.getMessage() for record in caplog.records]
    outsiders = SILENT_ADDRESSES + MALFORMED_ADDRESSES
    for address in outsiders:  # one line, however many connections it made (a silent address whose
        # connections all came while the outsiders' places were full was turned away unread: none)
        refusals = [line for line in lines if f"refused a coordinator connection from {address}:" in line]
        expected = (1,) if address in MALFORMED_ADDRESSES else (0, 1)
        assert len(refusals) in expected, (address, refusals)
    summary = [line for line in lines if line.startswith("the coordinator refused")]
    assert len(summary) == 1 and all(f"{address} (" in summary[0] for address in outsiders), summary
    assert WORKER_ADDRESS not in summary[0]


def answer_to_a_start(address: str, port: int) -> bytes:
    """What the master answers to a well-formed handshake start (an outsider's, for algo-2) from ``address``:
    its SPAKE2 reply, or nothing when it turns the connection away unheard."""
    start = PeerSide("algo-2", OTHER_SECRET.host_key("algo-2")).start()
    with connected_from(address, port, 5) as sock:
        try:
            sock.sendall(canonical_json(encode(start)) + b"\n")
            sock.settimeout(PARK_SECONDS + 10)  # a paused address's connection is held that long, unread
            return sock.recv(4096)
        except ConnectionResetError:  # closed before it read what was sent
            return b""


def test_an_outsider_paused_for_malformed_starts_is_held_unanswered_then_heard_once_its_pause_ends(
    master, monkeypatch
):
    """Three malformed starts pause an outsider's address: its next connections are neither read nor closed
    at once (its client, holding connections, opens no new one meanwhile), then closed unanswered; once
    the pause is over it is answered again."""
    monkeypatch.setattr(trust_module, "PAUSE_SECONDS", 3.0)
    _, _, port = master
    for _ in range(FAILURES_BEFORE_PAUSE):
        with connected_from("127.0.0.40", port, 5) as sock:
            sock.sendall(WRONG_SIDE)
            sock.settimeout(5)
            assert sock.recv(4096) == b""  # closed unanswered
    with connected_from("127.0.0.40", port, 5) as held:
        held.settimeout(0.5)
        with pytest.raises(TimeoutError):
            held.recv(1)  # held open, unread
    assert answer_to_a_start("127.0.0.40", port) == b""  # paused: even a well-formed start is not read
    assert answer_to_a_start("127.0.0.41", port) != b""  # another address is answered meanwhile
    deadline = Deadline(30, "127.0.0.40's pause to end")
    backoff = Backoff(deadline, most=MAX_CONNECT_BACKOFF_SECONDS)
    while answer_to_a_start("127.0.0.40", port) == b"":  # heard again once its pause is over
        assert backoff.pause(), deadline.timeout_message()


@pytest.fixture
def master_where_algo_2_is_this_host() -> Iterator[tuple[EventQueue, int]]:
    events = EventQueue()
    server = CoordinatorServer(
        events, ["algo-2"], lambda hello: Welcome(), host_keys=KEYS, bind_address="127.0.0.1",
        resolve=lambda host: frozenset({"127.0.0.1"}) if host == "algo-2" else frozenset(),
    )  # fmt: skip
    port = server.start()
    yield events, port
    server.close()


def test_a_worker_given_another_secret_fails_both_hosts_at_once_naming_the_cause(
    master_where_algo_2_is_this_host,
):
    events, port = master_where_algo_2_is_this_host
    worker = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-2", OTHER_SECRET.host_key("algo-2"))
    with pytest.raises(
        PlatformError, match="did not accept this host's proof of membership, or did not prove"
    ):
        worker.join(Hello(), Deadline(10, "the master"))
    with pytest.raises(UserError) as master_failure:
        wait_for_hosts(events, ("algo-2",), until_ready=False, deadline=Deadline(10, "algo-2 to join"))
    assert master_failure.value.cause == (
        "host algo-2 (127.0.0.1) refused this host's proof of membership of the job: their keys differ, so "
        "the two hosts were not given the same hyperparameters.json, inputdataconfig.json and job secret (if "
        "any: SAGETRAIN_JOB_SECRET, or its channel's file); give every host of the job the same"
    )


def test_an_outsider_claiming_a_worker_with_a_wrong_key_does_not_end_the_job(master):
    events, _, port = master
    rogue = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-2", OTHER_SECRET.host_key("algo-2"))
    with pytest.raises(PlatformError, match="did not accept this host's proof of membership"):
        rogue.join(Hello(), Deadline(10, "the master"))  # from 127.0.0.1: not an address of algo-2
    assert events.get(Deadline(1, "no event from an outsider")) is None
    assert join_from(WORKER_ADDRESS, port, KEYS["algo-2"]) == Welcome()
    joined = events.get(Deadline(10, "algo-2's join"))
    assert isinstance(joined, HostChanged) and joined.state is HostState.JOINED, joined
