"""How a peer and the master prove to each other that they belong to the job, and which peers the master
hears at all: the handshake, its drivers on both sides of a connection, and the master's admission.

The key each host proves itself with (config/job_secret.py: ``Membership``) may be guessable: without a
secret it derives from the job's description. So no value a host sends before the other side has proved
membership may be checkable against a guess. A password-authenticated key exchange gives exactly that:
SPAKE2 (the ``spake2`` package, Ed25519 group) over the peer host's key, the master as side A, the host
as side B, both named in the exchange::

    peer   → master   PakeStart(host, X)          X: the peer's SPAKE2 message
    master → peer     PakeReply(Y, proof_master)  Y: the master's; proof: a MAC under the shared key
    peer   → master   PakeProof(proof_peer)

X and Y are random group elements whatever the key; the shared key K needs one side's key and secret
exponent. Someone without the key who answers as the master (or connects as a peer) commits to one guess
in the message it sends, and learns from the other side's proof only whether that one guess was right:
each attempt online tests one guess. The master proves first; a peer that sees a wrong proof sends
nothing more. From K both sides derive the connection's session key, with which every later message
carries a MAC (wire.py).

The master checks a peer's first message for what costs nothing (its shape: a host name, a peer's SPAKE2
message of the right length and side) and asks its admission before it does any SPAKE2 work, which costs
milliseconds of CPU: a stream of malformed starts costs it no more than reading them.

A peer whose key differs from the master's (a worker given another job secret) sees the master's proof
fail and says so (``PakeRefused``), which tells an impostor master nothing closing the connection would
not: the master then knows that whoever claims that host has another key (server.py decides whether to
believe the claim).

Admission: so that no one on the job's network can starve the master, it bounds the handshakes under way
(per peer address, and in all for addresses that are not the job's own), gives an address that has never
proved membership at most three guesses of a key per pause, pauses an address not the job's own whose
connections keep sending no handshake, and counts refusals rather than logging one line each. The job's
own addresses (this host, the addresses the job's hosts resolve to, and those that proved membership)
have places of their own that no other address can take. Pure but for the clock it is given.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from spake2 import SPAKE2_A, SPAKE2_B
from spake2.ed25519_basic import NotOnCurve
from spake2.spake2 import SPAKEError

from sagetrain.contracts import canonical_json
from sagetrain.deadline import Deadline
from sagetrain.launch.coordinator.wire import (
    CORE,
    Catalogue,
    Connection,
    PakeProof,
    PakeRefused,
    PakeReply,
    PakeStart,
    WireMessage,
    quoted,
    same_digest,
)

MASTER_ID = b"master"
# A peer's SPAKE2 message: spake2's side byte for side B, then an Ed25519 point (32 bytes).
PEER_SIDE = b"B"
SPAKE2_MESSAGE_BYTES = 33
MAX_HOST_NAME = 255
# What spake2 raises for a message that is not one of the other side's group elements.
_NOT_A_SPAKE2_MESSAGE = (SPAKEError, NotOnCurve, ValueError, TypeError, IndexError)


class HandshakeFailed(Exception):
    """The other side did not prove membership of the job (or did not follow the handshake)."""


class HandshakeMalformed(HandshakeFailed):
    """The peer sent no handshake start in its time, or something that is not one: nothing was answered."""


class ProofRefused(HandshakeFailed):
    """The peer, claiming ``host``, said the master's proof does not hold under its key."""

    def __init__(self, host: str) -> None:
        super().__init__(f"it claims to be host {quoted(host)} and refused this host's proof of membership")
        self.host = host


def start_problem(start: PakeStart) -> str | None:
    """What makes a peer's first message no start of a handshake, found without SPAKE2 work; None when
    it is one. Pure."""
    if not start.host or len(start.host) > MAX_HOST_NAME:
        return f"a host name that is empty or longer than {MAX_HOST_NAME} characters"
    try:
        element = base64.b64decode(start.pake, validate=True)
    except (binascii.Error, ValueError):
        return "a SPAKE2 message that is not base64"
    if len(element) != SPAKE2_MESSAGE_BYTES or element[:1] != PEER_SIDE:
        return "a SPAKE2 message that is not a peer's (its length, or its side)"
    return None


@dataclass(frozen=True)
class SessionKeys:
    """What both sides derive from SPAKE2's shared key and the exchange's transcript."""

    master_proof: str
    peer_proof: str
    session: bytes

    def __repr__(self) -> str:
        return "SessionKeys(<hidden>)"

    @classmethod
    def of(cls, shared: bytes, start: PakeStart, master_pake: str) -> SessionKeys:
        transcript = canonical_json({"host": start.host, "peer": start.pake, "master": master_pake})

        def derive(label: bytes) -> bytes:
            return hmac.new(shared, label + b"\x00" + transcript, hashlib.sha256).digest()

        return cls(derive(b"master proof").hex(), derive(b"peer proof").hex(), derive(b"session"))


def _element(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HandshakeFailed("a SPAKE2 message that is not base64") from None


def _encoded(element: bytes) -> str:
    return base64.b64encode(element).decode("ascii")


class PeerSide:
    """A host's side: ``start`` gives its first message, ``finish`` checks the master's reply and gives
    the proof to send and the session key."""

    def __init__(self, host: str, host_key: bytes) -> None:
        self._spake = SPAKE2_B(host_key, idA=MASTER_ID, idB=host.encode())
        self._start = PakeStart(host, _encoded(self._spake.start()))

    def start(self) -> PakeStart:
        return self._start

    def finish(self, reply: object) -> tuple[PakeProof, bytes]:
        if not isinstance(reply, PakeReply):
            raise HandshakeFailed("the master did not answer the handshake")
        try:
            shared = self._spake.finish(_element(reply.pake))
        except _NOT_A_SPAKE2_MESSAGE:
            raise HandshakeFailed("the master's SPAKE2 message is not valid") from None
        keys = SessionKeys.of(shared, self._start, reply.pake)
        if not same_digest(keys.master_proof, reply.proof):
            raise HandshakeFailed("the master did not prove membership of the job")
        return PakeProof(keys.peer_proof), keys.session


class MasterSide:
    """The master's side for one peer's ``PakeStart``: ``reply`` to send, then ``finish`` with the peer's
    proof gives the session key."""

    def __init__(self, start: PakeStart, host_key: bytes) -> None:
        spake = SPAKE2_A(host_key, idA=MASTER_ID, idB=start.host.encode())
        pake = _encoded(spake.start())
        try:
            shared = spake.finish(_element(start.pake))
        except _NOT_A_SPAKE2_MESSAGE:
            raise HandshakeFailed("the peer's SPAKE2 message is not valid") from None
        self._keys = SessionKeys.of(shared, start, pake)
        self.reply = PakeReply(pake, self._keys.master_proof)

    def finish(self, proof: object) -> bytes:
        if not isinstance(proof, PakeProof) or not same_digest(self._keys.peer_proof, proof.proof):
            raise HandshakeFailed("the peer did not prove membership of the job")
        return self._keys.session


def authenticate_peer(
    connection: Connection,
    host_keys: Mapping[str, bytes],
    deadline: Deadline,
    may_answer: Callable[[], bool] = lambda: True,
    first_deadline: Deadline | None = None,
) -> tuple[str, WireMessage]:
    """Master's side of the handshake: (the peer's host, its first message), the connection secure.
    The peer's start must come by ``first_deadline`` (default: ``deadline``). The master answers only
    a well-formed start, and only when ``may_answer()`` (its answer lets the peer test one guess of a
    key). Raises HandshakeMalformed when no well-formed start came, ProofRefused when the peer refused
    the master's proof, HandshakeFailed when it does not prove membership of the job within ``deadline``."""
    start = connection.receive(first_deadline or deadline)
    if not isinstance(start, PakeStart):
        raise HandshakeMalformed("it sent no handshake in its time, or something that is not one")
    problem = start_problem(start)
    if problem is not None:
        raise HandshakeMalformed(f"its handshake started with {problem}")
    if not may_answer():
        raise HandshakeFailed("its address has no guesses left before its pause")
    key = host_keys.get(start.host)
    # A host that is not the job's gets an answer like any other, under a key nobody has: it learns
    # nothing about which hosts are, and fails like a member with the wrong key.
    side = MasterSide(start, secrets.token_bytes(32) if key is None else key)
    try:
        connection.send(side.reply)
    except OSError:
        raise HandshakeFailed("the connection broke") from None
    if key is None:
        raise HandshakeFailed(f"claims to be host {quoted(start.host)}, which is not one of this job's")
    answer = connection.receive(deadline)
    if isinstance(answer, PakeRefused):
        raise ProofRefused(start.host)
    session = side.finish(answer)
    connection.secure(session, outgoing=MASTER_ID, incoming=start.host.encode())
    first = connection.receive(deadline)
    if first is None:
        raise HandshakeFailed(f"host {start.host} proved membership, then sent nothing of ours")
    return start.host, first


def open_authenticated(
    sock: socket.socket,
    host: str,
    key: bytes,
    first: WireMessage,
    deadline: Deadline,
    catalogue: Catalogue = CORE,
    side: PeerSide | None = None,
) -> Connection:
    """A member's side of the handshake, then ``first``; the connection, secure, reading the messages of
    ``catalogue``. ``side``: this host's side, made before connecting, so that its first message (whose
    SPAKE2 work takes milliseconds of CPU, more on a busy host) goes out as soon as it is connected: the
    master waits a second for it (server.py). Raises HandshakeFailed when the master does not prove
    membership of the job, OSError when the connection breaks first."""
    connection = Connection(sock, catalogue)
    side = side or PeerSide(host, key)
    connection.send(side.start())
    reply = connection.receive(deadline)
    if reply is None:
        raise OSError("the coordinator closed the connection before the handshake")
    try:
        proof, session = side.finish(reply)
    except HandshakeFailed:
        with contextlib.suppress(OSError):  # tells whoever answered only what closing would
            connection.send(PakeRefused())
        raise
    connection.send(proof)
    connection.secure(session, outgoing=host.encode(), incoming=MASTER_ID)
    connection.send(first)
    return connection


# --- admission -------------------------------------------------------------------------------------

# Handshakes under way at once: from addresses that are not the job's own, in all (each waits for a place
# and retries), and from one address (one host runs at most a few dozen ranks; its rank launchers report at
# once). The job's own addresses are bounded per address only: no other address takes their places.
MAX_HANDSHAKES = 256
MAX_HANDSHAKES_PER_PEER = 32
# An address that has never proved membership has at most this many handshakes answered and not yet
# proved (each lets its sender test one guess of a key); after this many failures in a row it waits
# PAUSE_SECONDS before it is heard again, with a new allowance. A member never fails one. For an address
# that is not the job's own, a connection that sends no handshake in its time, or a malformed one, is a
# failure too: a member's never is.
FAILURES_BEFORE_PAUSE = 3
PAUSE_SECONDS = 30.0


class HandshakeEnd(Enum):
    """How a handshake the master took on ended."""

    PROVED = "proved"  # the peer proved membership
    FAILED = "failed"  # answered (the peer could test one guess), not proved
    MALFORMED = "malformed"  # no well-formed start in its time: nothing answered, nothing guessed
    UNANSWERED = "unanswered"  # turned away before the master answered (no guesses left), or our trouble


@dataclass
class _Peer:
    handshakes: int = 0
    pooled: int = 0  # of them, in the places shared by addresses that are not the job's own
    answered: int = 0  # handshakes answered and not yet ended
    failures: int = 0
    own: bool = False  # this host, or an address one of the job's hosts resolves to
    proved: bool = False  # this address has proved membership: its hosts' processes are not held to guesses
    paused_until: float = 0.0
    refused: int = 0  # connections refused, or handshakes failed, since it was last reported
    logged: bool = False  # a failed handshake of this peer has had its log line

    @property
    def the_jobs(self) -> bool:
        return self.own or self.proved


@dataclass
class Admission:
    """The coordinator's book of peers. ``begin`` before a handshake (False: close the connection at
    once), ``may_answer`` before the master's answer (False: close it unanswered), then ``end`` with the
    handshake's outcome."""

    clock: Callable[[], float] = time.monotonic
    max_handshakes: int = MAX_HANDSHAKES  # in all, from addresses that are not the job's own
    max_per_peer: int = MAX_HANDSHAKES_PER_PEER
    _peers: dict[str, _Peer] = field(default_factory=dict)
    _under_way: int = 0  # in the shared places
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def recognise(self, addresses: Iterable[str]) -> None:
        """``addresses`` are the job's own (one of the job's hosts resolves to each)."""
        with self._lock:
            for address in addresses:
                self._peers.setdefault(address, _Peer()).own = True

    def begin(self, peer: str, *, own: bool = False) -> bool:
        """Whether to take on a connection of ``peer`` (``own``: it is known to be the job's, as a
        connection from this host is)."""
        with self._lock:
            state = self._peers.setdefault(peer, _Peer())
            state.own = state.own or own
            shared = 0 if state.the_jobs else 1  # takes one of the places shared by other addresses
            pool_full = shared and self._under_way >= self.max_handshakes
            if state.handshakes >= self.max_per_peer or pool_full or self.clock() < state.paused_until:
                state.refused += 1
                return False
            state.handshakes += 1
            state.pooled += shared
            self._under_way += shared
            return True

    def may_answer(self, peer: str) -> bool:
        """Whether the master may answer this handshake of ``peer`` (one begun): an address that has never
        proved membership gets no more answers than it has guesses left, and none while it is paused (a
        handshake begun just before the pause started would otherwise get a fourth)."""
        with self._lock:
            state = self._peers[peer]
            guessed_out = not state.proved and state.failures + state.answered >= FAILURES_BEFORE_PAUSE
            if guessed_out or self.clock() < state.paused_until:
                state.refused += 1
                return False
            state.answered += 1
            return True

    def end(self, peer: str, outcome: HandshakeEnd) -> bool:
        """The handshake is over; whether it was the peer's first failed or malformed one (the one worth
        a log line: the others are counted for ``refusals``)."""
        with self._lock:
            state = self._peers[peer]
            state.handshakes -= 1
            if state.pooled:
                state.pooled -= 1
                self._under_way -= 1
            if outcome in (HandshakeEnd.PROVED, HandshakeEnd.FAILED):
                state.answered -= 1
            if outcome is HandshakeEnd.PROVED:
                state.failures, state.proved = 0, True
            if outcome in (HandshakeEnd.PROVED, HandshakeEnd.UNANSWERED):
                return False
            state.refused += 1
            if outcome is HandshakeEnd.FAILED or not state.the_jobs:
                self._count_failure(state)
            first, state.logged = not state.logged, True
            return first

    def _count_failure(self, state: _Peer) -> None:
        state.failures += 1
        if state.failures >= FAILURES_BEFORE_PAUSE:
            state.failures, state.paused_until = 0, self.clock() + PAUSE_SECONDS

    def paused_outsider(self, peer: str) -> bool:
        """Whether ``peer`` is an address not the job's own, paused now."""
        with self._lock:
            state = self._peers.get(peer)
            return state is not None and not state.the_jobs and self.clock() < state.paused_until

    def refusals(self) -> dict[str, int]:
        """{peer: connections refused or failed since the last call}, and forget them."""
        with self._lock:
            counted = {peer: state.refused for peer, state in self._peers.items() if state.refused}
            for state in self._peers.values():
                state.refused = 0
            return counted
