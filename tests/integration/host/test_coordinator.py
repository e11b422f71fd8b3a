"""The coordinator over real loopback sockets: joining, rejection, lost peers, rank reports, and peers that
cannot prove membership of the job."""

import contextlib
import json
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from sagetrain.config.job_secret import Membership
from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError, UserError
from sagetrain.launch.coordinator import (
    EventQueue,
    HostChanged,
    HostState,
    MasterEnded,
    RankReport,
    send_rank_failure,
    send_rank_started,
)
from sagetrain.launch.coordinator import server as coordinator_module
from sagetrain.launch.coordinator.client import CoordinatorClient
from sagetrain.launch.coordinator.events import wait_for_hosts
from sagetrain.launch.coordinator.server import CoordinatorServer
from sagetrain.launch.coordinator.trust import PAUSE_SECONDS, Admission, HandshakeEnd, PeerSide
from sagetrain.launch.coordinator.wire import MAC_FIELD, Hello, Outcome, PakeProof, PakeStart, Welcome, encode
from sagetrain.report.verdict import RankFailure, Verdict

pytestmark = pytest.mark.timeout(30)

JOB = Membership(b"k" * 32)
ROGUE = Membership(b"r" * 32)  # a peer that does not have the job's files
KEYS = {host: JOB.host_key(host) for host in ("algo-1", "algo-2")}


def expect(events, kind, state=None):
    deadline = Deadline(10, f"a {kind.__name__} event")
    event = events.get(deadline)
    assert isinstance(event, kind), (event, deadline.timeout_message())
    if state is not None:
        assert event.state is state, event
    return event


class Clock:
    """The admission's clock, moved by the test."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


@dataclass
class CountedAdmission(Admission):
    """An admission that says when handshakes have ended: the server's threads record a failure in their
    own time, and a test moves the clock past a pause only once it is recorded."""

    ended: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def end(self, peer: str, outcome: HandshakeEnd) -> bool:
        first = super().end(peer, outcome)
        self.ended.release()
        return first

    def wait_ended(self, count: int) -> None:
        assert all(self.ended.acquire(timeout=15) for _ in range(count)), f"{count} handshakes to end"


@pytest.fixture
def admission(clock):
    return CountedAdmission(clock=clock)


@pytest.fixture
def master(admission):
    events = EventQueue()
    server = CoordinatorServer(
        events,
        ["algo-2"],
        lambda hello: Welcome(ssh_client_key=f"answer to {hello.ssh_host_key}"),
        host_keys=KEYS,
        bind_address="127.0.0.1",
        rank_host=lambda rank: "algo-2" if rank in (1, 5) else "algo-1",
        admission=admission,
    )
    port = server.start()
    yield events, server, port
    server.close()


def test_join_welcome_verdict_and_goodbye(master):
    events, server, port = master
    worker_events = EventQueue()
    client = CoordinatorClient(worker_events, "127.0.0.1", port, "algo-2", KEYS["algo-2"])
    welcome = client.join(Hello(ssh_host_key="question 21"), Deadline(10, "the master"))
    assert welcome == Welcome(ssh_client_key="answer to question 21")
    assert expect(events, HostChanged, HostState.JOINED).hello.ssh_host_key == "question 21"
    client.listen()
    server.broadcast(Verdict(3, "rank 1 failed"))
    assert expect(worker_events, MasterEnded).verdict == Verdict(3, "rank 1 failed")
    client.close()
    assert server.wait_until_disconnected(Deadline(10, "the worker to hang up")) == []
    assert events.get(Deadline(0.2, "no lost-host event after the verdict")) is None


def test_unknown_host_is_rejected(master):
    _, _, port = master
    client = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-7", JOB.host_key("algo-7"))
    # A host that is not one of the job's cannot prove membership: it is dropped without an answer.
    with pytest.raises(PlatformError, match="did not accept this host's proof of membership"):
        client.join(Hello(ssh_host_key="question 1"), Deadline(10, "the master"))


def test_worker_that_drops_mid_job_is_a_lost_host(master):
    events, _, port = master
    client = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-2", KEYS["algo-2"])
    client.join(Hello(ssh_host_key="question 1"), Deadline(10, "the master"))
    expect(events, HostChanged, HostState.JOINED)
    client._connection.close()  # the host vanishes without a verdict
    assert expect(events, HostChanged, HostState.LOST).host == "algo-2"


def test_master_that_goes_away_is_reported_to_the_worker(master):
    _, server, port = master
    worker_events = EventQueue()
    client = CoordinatorClient(worker_events, "127.0.0.1", port, "algo-2", KEYS["algo-2"])
    client.join(Hello(ssh_host_key="question 1"), Deadline(10, "the master"))
    client.listen()
    server.close()
    ended = expect(worker_events, MasterEnded)
    assert (ended.verdict, ended.reason) == (None, "the connection closed")


def test_rank_failure_is_acknowledged_before_the_rank_exits(master):
    events, _, port = master
    failure = RankFailure(1, "algo-2", 3, "train.py", "boom", "", ("last",))
    assert send_rank_failure(("127.0.0.1", port), KEYS["algo-2"], failure)
    assert expect(events, RankReport) == RankReport(1, "algo-2", failure)


def test_rank_start_is_acknowledged_before_the_program_starts(master):
    events, _, port = master
    assert send_rank_started(("127.0.0.1", port), KEYS["algo-2"], 5, "algo-2")
    assert expect(events, RankReport) == RankReport(5, "algo-2")


def test_joining_a_master_that_never_starts_times_out_naming_it():
    client = CoordinatorClient(
        EventQueue(), "127.0.0.1", 9, "algo-2", KEYS["algo-2"]
    )  # nothing listens on port 9
    with pytest.raises(PlatformError, match=r"timed out after 1 s waiting for the master at 127\.0\.0\.1:9"):
        client.join(Hello(), Deadline(1, "the master at 127.0.0.1:9"))


def test_a_worker_with_another_host_list_fails_both_sides_at_once_naming_the_lists():
    events = EventQueue()
    server = CoordinatorServer(
        events,
        ["algo-2"],
        lambda hello: Welcome(),
        host_keys=KEYS,
        bind_address="127.0.0.1",
        job_hosts=("algo-1", "algo-2"),
    )
    port = server.start()
    try:
        client = CoordinatorClient(
            EventQueue(),
            "127.0.0.1",
            port,
            "algo-2",
            KEYS["algo-2"],
            job_hosts=("algo-1", "algo-2", "algo-3"),
        )
        expected = 'lists hosts "algo-1, algo-2, algo-3" but the master\'s lists algo-1, algo-2'
        with pytest.raises(UserError, match=expected):
            client.join(Hello(), Deadline(10, "the master"))
        # The master does not wait out its join timeout for a host that can never fit.
        with pytest.raises(UserError, match=expected):
            wait_for_hosts(events, ("algo-2",), until_ready=False, deadline=Deadline(10, "algo-2"))
    finally:
        server.close()


def test_a_peer_without_the_jobs_key_can_neither_join_nor_report_nor_end_the_job(master, clock, admission):
    events, _, port = master
    rogue = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-2", ROGUE.host_key("algo-2"))
    with pytest.raises(PlatformError, match="did not accept this host's proof of membership"):
        rogue.join(Hello(ssh_host_key="ssh-ed25519 AAAA rogue"), Deadline(10, "the master"))
    failure = RankFailure(1, "algo-2", 0, "train.py", "all good")
    assert not send_rank_failure(("127.0.0.1", port), ROGUE.host_key("algo-2"), failure, seconds=1)
    assert not send_rank_started(("127.0.0.1", port), ROGUE.host_key("algo-2"), 1, "algo-2", seconds=1)
    assert events.get(Deadline(0.5, "nothing from the rogue")) is None
    # The real worker still joins after the impostor (here from the same address: once its pause is over).
    admission.wait_ended(3)
    clock.now += PAUSE_SECONDS
    real = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-2", KEYS["algo-2"])
    real.join(Hello(ssh_host_key="question 2"), Deadline(10, "the master"))
    assert expect(events, HostChanged, HostState.JOINED).hello.ssh_host_key == "question 2"
    real.close()


def test_a_host_may_report_only_for_its_own_ranks(master):
    events, _, port = master
    # algo-2 is a member, but rank 0 runs on algo-1: algo-2 cannot say it failed.
    failure = RankFailure(0, "algo-2", 1, "train.py", "rank 0 failed")
    assert not send_rank_failure(("127.0.0.1", port), KEYS["algo-2"], failure, seconds=1)
    assert events.get(Deadline(0.5, "no report for another host's rank")) is None


def test_a_worker_refuses_a_master_that_cannot_prove_membership():
    events = EventQueue()
    impostor = CoordinatorServer(
        events, ["algo-2"], lambda hello: Welcome(ssh_client_key="ssh-ed25519 AAAA impostor"),
        host_keys={"algo-2": ROGUE.host_key("algo-2")}, bind_address="127.0.0.1",
    )  # fmt: skip
    port = impostor.start()
    try:
        client = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-2", KEYS["algo-2"])
        with pytest.raises(PlatformError, match="did not accept this host's proof of membership, or did not"):
            client.join(Hello(), Deadline(10, "the master"))
    finally:
        impostor.close()


def test_a_message_altered_or_replayed_on_a_joined_connection_is_dropped_with_the_connection(master):
    events, _, port = master
    client = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-2", KEYS["algo-2"])
    client.join(Hello(ssh_host_key="question 1"), Deadline(10, "the master"))
    expect(events, HostChanged, HostState.JOINED)
    # What an attacker on the path can do: send a well-formed message without the session's proof.
    forged = {**encode(Outcome(Verdict(exit_code=0))), MAC_FIELD: "00"}
    client._connection.sock.sendall(json.dumps(forged).encode() + b"\n")
    assert expect(events, HostChanged, HostState.LOST).host == "algo-2"
    client.close()


def closed_after(port: int, sending: bytes, pause: float, limit: float) -> float:
    """Send ``sending`` ``pause`` seconds a byte (all at once when 0); seconds until the master closed."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as sock:
        chunks = [bytes([byte]) for byte in sending] if pause else [sending]
        for chunk in chunks:
            try:
                sock.sendall(chunk)
            except OSError:
                break
            readable, _, _ = select.select([sock], [], [], pause)
            if readable and not sock.recv(4096):
                break
        else:
            with contextlib.suppress(OSError):
                while sock.recv(4096):
                    pass
    return time.monotonic() - started


def test_slow_silent_and_malformed_peers_are_dropped_at_the_handshake_deadline_and_a_member_joins(
    master, clock, admission, monkeypatch
):
    monkeypatch.setattr(coordinator_module, "HANDSHAKE_SECONDS", 1.0)
    uncaught = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    events, _, port = master
    slow = json.dumps(encode(PakeStart("algo-2", "QUJD"))).encode() + b"\n"
    peers = {
        "slow": (slow, 0.25),  # would take 14 s
        "silent": (b"", 0),
        "deep": (b"[" * 1000 + b"\n", 0),  # json cannot read it: RecursionError
        "long": (b"x" * 100_000, 0),
        "not a message": (slow.replace(b'"host": "algo-2", ', b""), 0),
        "not Unicode": (slow.replace(b"algo-2", b"\\ud800"), 0),  # a lone surrogate as the host
    }
    with ThreadPoolExecutor(len(peers)) as pool:
        held = {
            name: pool.submit(closed_after, port, data, pause, 20) for name, (data, pause) in peers.items()
        }
        seconds = {name: future.result(30) for name, future in held.items()}
    assert all(value < 5 for value in seconds.values()), seconds
    assert uncaught == []
    # None of them had an answer to test a guess with: their places are given back, their address (this
    # test's) is not paused, and a member joins at once.
    admission.wait_ended(len(peers))
    member = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-2", KEYS["algo-2"])
    member.join(Hello(ssh_host_key="question 3"), Deadline(10, "the master"))
    assert expect(events, HostChanged, HostState.JOINED).host == "algo-2"
    member.close()


def test_a_peer_over_its_share_of_handshakes_is_turned_away_unheard_and_heard_once_they_end(clock):
    events = EventQueue()
    admission = CountedAdmission(clock=clock, max_handshakes=8, max_per_peer=4)
    server = CoordinatorServer(
        events, ["algo-2"], lambda hello: Welcome(), host_keys=KEYS, bind_address="127.0.0.1",
        admission=admission,
    )  # fmt: skip
    port = server.start()
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]  # silent, within the deadline
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        assert extra.recv(1) == b""  # closed at once: 127.0.0.1 has its 4 handshakes under way
        extra.close()
    finally:
        for sock in held:
            sock.close()  # unanswered: no guess tested, the address is not paused
    try:
        admission.wait_ended(len(held))
        assert send_rank_started(("127.0.0.1", port), KEYS["algo-2"], 1, "algo-2", seconds=15)
        assert expect(events, RankReport) == RankReport(1, "algo-2")
    finally:
        server.close()


def test_three_wrong_proofs_pause_an_address_and_text_no_encoder_takes_ends_only_its_connection(
    master, clock, admission, monkeypatch
):
    """An outsider answered three times has tested three guesses: its address waits out the pause. A
    proof or a MAC field that is not ASCII, or not even Unicode, is a wrong proof, not a dead thread."""
    uncaught = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    events, _, port = master
    for proof in ("\u00e9" * 64, "\ud800", "0" * 64):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            peer = PeerSide("algo-2", ROGUE.host_key("algo-2"))
            sock.sendall(json.dumps(encode(peer.start())).encode() + b"\n")
            assert sock.recv(4096)  # the master's answer
            sock.sendall(json.dumps(encode(PakeProof(proof))).encode() + b"\n")
            assert sock.recv(4096) == b""  # closed
    admission.wait_ended(3)
    assert uncaught == []
    assert not send_rank_started(("127.0.0.1", port), KEYS["algo-2"], 1, "algo-2", seconds=1)  # paused
    clock.now += PAUSE_SECONDS
    member = CoordinatorClient(EventQueue(), "127.0.0.1", port, "algo-2", KEYS["algo-2"])
    member.join(Hello(ssh_host_key="question 4"), Deadline(10, "the master"))
    assert expect(events, HostChanged, HostState.JOINED).host == "algo-2"
    member.close()
