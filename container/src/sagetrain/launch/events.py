"""What the engines' loops react to, posted by watcher and coordinator threads into one queue: a process
of ours exited, a worker host changed state, a rank reported, or (for a worker) the master ended the job.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from enum import Enum

from sagetrain.deadline import Deadline
from sagetrain.launch.messages import Hello
from sagetrain.report.verdict import RankFailure, Verdict


@dataclass(frozen=True)
class ProcessExited:
    """A process this entry started (the program, mpirun, sshd, a parameter server) exited."""

    name: str
    exit_code: int


class HostState(Enum):
    """A worker host as the master's coordinator sees it:

    JOINED ──► READY    MPI: its sshd takes the master's key
      │ └────► DONE     TF_CONFIG: its program ended; ``verdict`` says how
      └──────► LOST     its connection closed before the job's verdict
    REJECTED            refused on joining: its configuration cannot work with the master's
    """

    JOINED = "joined"
    READY = "ready"
    DONE = "done"
    REJECTED = "rejected"
    LOST = "lost"


@dataclass(frozen=True)
class HostChanged:
    host: str
    state: HostState
    hello: Hello | None = None  # JOINED: what the host sent
    verdict: Verdict | None = None  # DONE
    reason: str = ""  # REJECTED, LOST: one sentence

    @property
    def failed(self) -> bool:
        """A DONE host whose program failed."""
        return self.state is HostState.DONE and self.verdict is not None and not self.verdict.succeeded


@dataclass(frozen=True)
class RankReport:
    """A rank launcher's report to the master: that its rank starts (no ``failure``), or how it failed."""

    rank: int
    host: str
    failure: RankFailure | None = None


@dataclass(frozen=True)
class MasterEnded:
    """For a worker: the master's verdict, or (``verdict`` None) why contact with the master was lost."""

    verdict: Verdict | None
    reason: str = ""


Event = ProcessExited | HostChanged | RankReport | MasterEnded


def failure_of(event: Event | None) -> RankFailure | None:
    """The rank failure ``event`` reports, if it is one."""
    return event.failure if isinstance(event, RankReport) else None


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
