"""Events the engines' loops react to, posted by watcher and coordinator threads into one queue."""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Any

from sagetrain.deadline import Deadline
from sagetrain.report.verdict import RankFailure, Verdict


@dataclass(frozen=True)
class ProcessExited:
    name: str
    exit_code: int


@dataclass(frozen=True)
class HostJoined:
    host: str
    hello: dict[str, Any]


@dataclass(frozen=True)
class HostReady:
    host: str


@dataclass(frozen=True)
class HostOutcome:
    host: str
    verdict: Verdict


@dataclass(frozen=True)
class HostRejected:
    """A host tried to join with a configuration that cannot work with the master's."""

    host: str
    reason: str


@dataclass(frozen=True)
class HostLost:
    host: str
    reason: str


@dataclass(frozen=True)
class RankStarted:
    """A rank launcher is up and about to start its program."""

    rank: int
    host: str


@dataclass(frozen=True)
class RankFailed:
    failure: RankFailure


@dataclass(frozen=True)
class VerdictReceived:
    verdict: Verdict


@dataclass(frozen=True)
class MasterLost:
    master: str
    reason: str


Event = (
    ProcessExited
    | HostJoined
    | HostReady
    | HostOutcome
    | HostRejected
    | HostLost
    | RankStarted
    | RankFailed
    | VerdictReceived
    | MasterLost
)


class EventQueue:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()

    def put(self, event: Event) -> None:
        self._queue.put(event)

    def get(self, deadline: Deadline | None = None) -> Event | None:
        """The next event; None once ``deadline`` passes first."""
        try:
            return self._queue.get(timeout=None if deadline is None else deadline.remaining())
        except queue.Empty:
            return None
