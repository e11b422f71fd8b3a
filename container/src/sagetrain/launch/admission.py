"""Which connections the master's coordinator takes on, so that no one on the job's network can starve it:
a bound on the handshakes under way (in all, and per peer address), a pause for a peer whose handshakes
keep failing, and refusals counted rather than logged one line each. Pure but for the clock it is given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# Handshakes under way at once: in all (rank launchers of a large job report at once; each waits for a
# place and retries), and from one peer address (one host runs at most a few dozen ranks).
MAX_HANDSHAKES = 256
MAX_HANDSHAKES_PER_PEER = 32
# A peer whose handshakes failed this many times in a row waits this long before it is heard again: a
# member never fails one, and each failure let its sender test one guess of a key.
FAILURES_BEFORE_PAUSE = 3
PAUSE_SECONDS = 30.0


@dataclass
class _Peer:
    handshakes: int = 0
    failures: int = 0
    paused_until: float = 0.0
    refused: int = 0  # connections refused, or handshakes failed, since it was last reported
    logged: bool = False  # a failed handshake of this peer has had its log line


@dataclass
class Admission:
    """The coordinator's book of peers. ``begin`` before a handshake (False: close the connection at
    once), then ``end`` with whether the peer proved membership."""

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

    def end(self, peer: str, *, proved: bool) -> bool:
        """The handshake is over; whether it was the peer's first failed one (the one worth a log line:
        the others are counted for ``refusals``)."""
        with self._lock:
            state = self._peers[peer]
            state.handshakes -= 1
            self._under_way -= 1
            if proved:
                state.failures = 0
                return False
            state.failures += 1
            state.refused += 1
            if state.failures >= FAILURES_BEFORE_PAUSE:
                state.paused_until = self.clock() + PAUSE_SECONDS
            first, state.logged = not state.logged, True
            return first

    def refusals(self) -> dict[str, int]:
        """{peer: connections refused or failed since the last call}, and forget them."""
        with self._lock:
            counted = {peer: state.refused for peer, state in self._peers.items() if state.refused}
            for state in self._peers.values():
                state.refused = 0
            return counted
