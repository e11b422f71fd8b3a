"""What the engines' loops react to, posted by watcher and coordinator threads into one queue: a process
of ours exited, a worker host changed state, a rank reported, or (for a worker) the master ended the job;
and what the hosts' start waits for in it.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from enum import Enum

from sagetrain.deadline import Deadline
from sagetrain.errors import ExitCode, PlatformError, SagetrainError, UserError
from sagetrain.launch.coordinator.wire import Hello
from sagetrain.report.verdict import RankFailure, Verdict, root_failure


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


class JobFailedEarly(SagetrainError):
    """A host's program failed while the master was still waiting for other hosts to join."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.cause)
        self.verdict = verdict
        self.exit_code = verdict.exit_code


def verdict_from_master(event: Event | None, master: str) -> Verdict | None:
    """For a worker: the verdict the master sent, a failure when the master is gone, else None."""
    if not isinstance(event, MasterEnded):
        return None
    if event.verdict is not None:
        return event.verdict
    return Verdict(ExitCode.PLATFORM_ERROR, f"lost contact with master host {master} ({event.reason})")


def wait_for_hosts(
    events: EventQueue, hosts: tuple[str, ...], *, until_ready: bool, deadline: Deadline
) -> dict[str, Hello]:
    """Until every host joined (and, for MPI, reported ready); their hello messages.

    Hosts that joined may already run their program (TF_CONFIG engines): a failed outcome ends the wait
    at once, and every other event that is not about joining is put back for the job's own loop."""
    hellos: dict[str, Hello] = {}
    waiting = set(hosts)
    deferred: list[Event] = []
    failures: list[RankFailure] = []
    arrived = HostState.READY if until_ready else HostState.JOINED
    try:
        while waiting:
            event = events.get(deadline)
            if event is None:
                missing = ", ".join(sorted(waiting))
                raise PlatformError(deadline.timeout_message(f"still missing: {missing}"))
            if isinstance(event, HostChanged) and event.state in (HostState.JOINED, HostState.READY):
                if event.state is HostState.JOINED and event.hello is not None:
                    hellos[event.host] = event.hello
                if event.state is arrived:
                    waiting.discard(event.host)
            else:
                _fail_if_it_ends_the_start(event, failures)
                deferred.append(event)
    finally:
        for event in deferred:
            events.put(event)
    return hellos


def _fail_if_it_ends_the_start(event: Event, failures: list[RankFailure]) -> None:
    """Raise when ``event`` ends the job while hosts are joining; keep rank failures for the root cause."""
    failure = failure_of(event)
    if failure is not None:
        failures.append(failure)
    if not isinstance(event, HostChanged):
        return
    if event.state is HostState.LOST:
        raise PlatformError(f"lost host {event.host} while the job was starting ({event.reason})")
    if event.state is HostState.REJECTED:
        raise UserError(event.reason)
    if event.failed and event.verdict is not None:
        root = root_failure(failures)
        raise JobFailedEarly(root.verdict() if root is not None else event.verdict)
