"""The hosts' side of the coordinator for the engines: the master's server (joins, ranks' reports, the
verdict's delivery) and a worker's connection to it (join, then the verdict or the master's loss).

On one host the master's server only takes its own ranks' reports, on a loopback port chosen at start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sagetrain import contracts
from sagetrain.deadline import Deadline
from sagetrain.errors import ExitCode, PlatformError, UserError
from sagetrain.launch.coordinator import CoordinatorClient, CoordinatorServer
from sagetrain.launch.events import (
    Event,
    EventQueue,
    HostChanged,
    HostState,
    MasterEnded,
    ProcessExited,
    failure_of,
)
from sagetrain.launch.lifecycle import JobFailedEarly
from sagetrain.launch.messages import Hello, Message, Welcome
from sagetrain.launch.spec import JobSpec
from sagetrain.plan.model import Plan
from sagetrain.report.verdict import RankFailure, Verdict, root_failure

log = logging.getLogger(__name__)

VERDICT_DELIVERY_SECONDS = 5.0
LOOPBACK = "127.0.0.1"


def coordinator_address(plan: Plan, port: int) -> str:
    """Where ranks report (SAGETRAIN_COORDINATOR): the master's coordinator port; on one host, the
    loopback port chosen at start."""
    return contracts.coordinator_value(plan.master if plan.multi_host else LOOPBACK, port)


class MasterCoordination:
    """The master's coordinator server for one job."""

    def __init__(
        self,
        spec: JobSpec,
        events: EventQueue,
        welcome: Callable[[Hello], Welcome] = lambda hello: Welcome(),
    ) -> None:
        plan = spec.plan
        self._spec = spec
        self._events = events
        # Every host's ranks report here, each proving it runs on the host it names.
        host_keys = {host: spec.membership.host_key(host) for host in plan.hosts}
        if plan.multi_host:
            self._server = CoordinatorServer(
                events, plan.workers, welcome, host_keys=host_keys, port=plan.launch.coordinator_port,
                job_hosts=plan.hosts, rank_host=plan.host_of_rank,
            )  # fmt: skip
        else:
            self._server = CoordinatorServer(
                events, (), welcome, host_keys=host_keys, bind_address=LOOPBACK, port=0,
                rank_host=plan.host_of_rank,
            )  # fmt: skip
        self.port = 0

    def open(self) -> str:
        """Listen; the address ranks report to."""
        self.port = self._server.start()
        return coordinator_address(self._spec.plan, self.port)

    def wait_for_workers(self, *, until_ready: bool) -> dict[str, Hello]:
        """Until every worker host joined (and, for MPI, reported ready); their hello messages."""
        plan = self._spec.plan
        if not plan.multi_host:
            return {}
        log.info("waiting for %s to join at port %d", ", ".join(plan.workers), self.port)
        deadline = self._spec.worker_wait(
            f"worker hosts to join master host {plan.master} on port {self.port}"
        )
        return wait_for_hosts(self._events, plan.workers, until_ready=until_ready, deadline=deadline)

    def deliver(self, verdict: Verdict, stop: Deadline | None) -> None:
        """Send the (final) verdict to every host, wait for them to confirm, close."""
        activity = "workers to receive the verdict"
        deadline = (
            Deadline(VERDICT_DELIVERY_SECONDS, activity)
            if stop is None
            else stop.part(VERDICT_DELIVERY_SECONDS, activity)
        )
        self._server.broadcast(verdict)
        still = self._server.wait_until_disconnected(deadline)
        if still:
            log.warning("hosts %s did not confirm the verdict", ", ".join(still))
        self._server.close()


class WorkerCoordination:
    """A worker's connection to the master's coordinator."""

    def __init__(self, spec: JobSpec, events: EventQueue) -> None:
        plan = spec.plan
        self._spec = spec
        self._events = events
        self._client = CoordinatorClient(
            events, plan.master, plan.launch.coordinator_port, plan.current_host,
            spec.membership.host_key(plan.current_host), job_hosts=plan.hosts,
        )  # fmt: skip
        self.address = coordinator_address(plan, plan.launch.coordinator_port)

    def join(self, hello: Hello) -> Welcome:
        """Join the master, retrying while it is not up yet; the master's welcome."""
        plan = self._spec.plan
        port = plan.launch.coordinator_port
        return self._client.join(
            hello, self._spec.worker_wait(f"master host {plan.master} to accept this host on port {port}")
        )

    def send(self, message: Message) -> None:
        self._client.send(message)

    def listen(self) -> None:
        """From now on the master's verdict, or its loss, arrives as an event."""
        self._client.listen()

    def wait_for_verdict(self, on_exit: Callable[[ProcessExited], Verdict | None]) -> Verdict:
        """Until the master's verdict, or its loss. ``on_exit`` says what the exit of a process of this
        host means: a verdict ends the wait, None lets it go on."""
        while True:
            event = self._events.get()
            verdict = verdict_from_master(event, self._spec.plan)
            if verdict is None and isinstance(event, ProcessExited):
                verdict = on_exit(event)
            if verdict is not None:
                return verdict

    def close(self) -> None:
        self._client.close()


def verdict_from_master(event: Event | None, plan: Plan) -> Verdict | None:
    """For a worker: the verdict the master sent, a failure when the master is gone, else None."""
    if not isinstance(event, MasterEnded):
        return None
    if event.verdict is not None:
        return event.verdict
    return Verdict(ExitCode.PLATFORM_ERROR, f"lost contact with master host {plan.master} ({event.reason})")


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
