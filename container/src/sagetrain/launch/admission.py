"""Which connections the master's coordinator takes on, so that no one on the job's network can starve it:
a bound on the handshakes under way (in all, and per peer address), at most three guesses of a key per
pause for an address that has never proved membership, and refusals counted rather than logged one line
each. Pure but for the clock it is given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

# Handshakes under way at once: in all (rank launchers of a large job report at once; each waits for a
# place and retries), and from one peer address (one host runs at most a few dozen ranks).
MAX_HANDSHAKES = 256
MAX_HANDSHAKES_PER_PEER = 32
# An address that has never proved membership has at most this many handshakes answered and not yet
# proved (each lets its sender test one guess of a key); after this many failures in a row it waits
# PAUSE_SECONDS before it is heard again, with a new allowance. A member never fails one.
FAILURES_BEFORE_PAUSE = 3
PAUSE_SECONDS = 30.0


class HandshakeEnd(Enum):
    """How a handshake the master took on ended."""

    PROVED = "proved"  # the peer proved membership
    FAILED = "failed"  # answered (the peer could test one guess), not proved
    UNANSWERED = "unanswered"  # ended before the master answered: no guess tested, nothing counted


@dataclass
class _Peer:
    handshakes: int = 0
    answered: int = 0  # handshakes answered and not yet ended
    failures: int = 0
    proved: bool = False  # this address has proved membership: its hosts' processes are not held to guesses
    paused_until: float = 0.0
    refused: int = 0  # connections refused, or handshakes failed, since it was last reported
    logged: bool = False  # a failed handshake of this peer has had its log line


@dataclass
class Admission:
    """The coordinator's book of peers. ``begin`` before a handshake (False: close the connection at
    once), ``may_answer`` before the master's answer (False: close it unanswered), then ``end`` with the
    handshake's outcome."""

    clock: Callable[[], float] = time.monotonic
    max_handshakes: int = MAX_HANDSHAKES
    max_per_peer: int = MAX_HANDSHAKES_PER_PEER
    _peers: dict[str, _Peer] = field(default_factory=dict)
    _under_way: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, peer: str) -> bool:
        with self._lock:
            state = self._peers.setdefault(peer, _Peer())
            full = self._under_way >= self.max_handshakes or state.handshakes >= self.max_per_peer
            if full or self.clock() < state.paused_until:
                state.refused += 1
                return False
            state.handshakes += 1
            self._under_way += 1
            return True

    def may_answer(self, peer: str) -> bool:
        """Whether the master may answer this handshake of ``peer`` (one begun): an address that has never
        proved membership gets no more answers than it has guesses left."""
        with self._lock:
            state = self._peers[peer]
            if not state.proved and state.failures + state.answered >= FAILURES_BEFORE_PAUSE:
                state.refused += 1
                return False
            state.answered += 1
            return True

    def end(self, peer: str, outcome: HandshakeEnd) -> bool:
        """The handshake is over; whether it was the peer's first failed one (the one worth a log line:
        the others are counted for ``refusals``)."""
        with self._lock:
            state = self._peers[peer]
            state.handshakes -= 1
            self._under_way -= 1
            if outcome is not HandshakeEnd.UNANSWERED:
                state.answered -= 1
            if outcome is HandshakeEnd.PROVED:
                state.failures, state.proved = 0, True
            if outcome is not HandshakeEnd.FAILED:
                return False
            state.failures += 1
            state.refused += 1
            if state.failures >= FAILURES_BEFORE_PAUSE:
                state.failures, state.paused_until = 0, self.clock() + PAUSE_SECONDS
            first, state.logged = not state.logged, True
            return first

    def refusals(self) -> dict[str, int]:
        """{peer: connections refused or failed since the last call}, and forget them."""
        with self._lock:
            counted = {peer: state.refused for peer, state in self._peers.items() if state.refused}
            for state in self._peers.values():
                state.refused = 0
            return counted
