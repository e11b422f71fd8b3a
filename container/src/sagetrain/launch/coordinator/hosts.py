"""The job's hosts meeting through the coordinator, as the engines and the SageMaker SDK's key exchange use
it: the master's side (its server: joins, ranks' reports, what it sends the workers) and a worker's side
(its connection: join, then the master's messages, the verdict or the master's loss).

On one host the master's server only takes its own ranks' reports, on a loopback port chosen at start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sagetrain import contracts
from sagetrain.config.job_secret import Membership
from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError
from sagetrain.launch.coordinator.client import CoordinatorClient
from sagetrain.launch.coordinator.events import (
    EventQueue,
    JobFailedEarly,
    ProcessExited,
    verdict_from_master,
    wait_for_hosts,
)
from sagetrain.launch.coordinator.server import CoordinatorServer, resolve_ipv4
from sagetrain.launch.coordinator.wire import (
    CORE,
    Catalogue,
    Hello,
    JobVerdict,
    Members,
    Welcome,
    WireMessage,
)
from sagetrain.plan.model import Plan
from sagetrain.report.verdict import Verdict

log = logging.getLogger(__name__)

VERDICT_DELIVERY_SECONDS = 5.0
LOOPBACK = "127.0.0.1"
# A wait's deadline, made from what it waits for (JobSpec.worker_wait: the sagetrain_worker_wait_seconds
# setting).
DeadlineFor = Callable[[str], Deadline]


def _no_rank_placed(rank: int) -> str | None:
    return None


@dataclass(frozen=True)
class JobHosts:
    """The job's hosts as the coordinator meets them."""

    hosts: tuple[str, ...]
    master: str
    current_host: str
    port: int  # the master's coordinator port; on one host 0: a loopback port chosen at start
    membership: Membership  # the keys the hosts (and their ranks) prove themselves with
    # The host a rank runs on (None: unknown): a rank's report counts only from there.
    rank_host: Callable[[int], str | None] = _no_rank_placed

    @classmethod
    def of_plan(cls, plan: Plan, membership: Membership) -> JobHosts:
        port = plan.launch.coordinator_port if plan.multi_host else 0
        return cls(plan.hosts, plan.master, plan.current_host, port, membership, plan.host_of_rank)

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(host for host in self.hosts if host != self.master)


def coordinator_address(plan: Plan, port: int) -> str:
    """Where ranks report (SAGETRAIN_COORDINATOR): the master's coordinator port; on one host, the
    loopback port chosen at start."""
    return contracts.coordinator_value(plan.master if plan.multi_host else LOOPBACK, port)


class MasterCoordinator:
    """The master's side for one job: its server, and waiting for the workers."""

    def __init__(
        self,
        job: JobHosts,
        events: EventQueue,
        welcome: Callable[[Hello], Welcome] = lambda hello: Welcome(),
        *,
        catalogue: Catalogue = CORE,
    ) -> None:
        """``welcome``: the answer to a worker's hello; ``catalogue``: the messages its connections read."""
        self._job = job
        self._events = events
        # Every host's ranks report here, each proving it runs on the host it names.
        host_keys = {host: job.membership.host_key(host) for host in job.hosts}
        if job.workers:
            # The workers' addresses, as their names resolve, keep places of their own.
            self._server = CoordinatorServer(
                events, job.workers, welcome, host_keys=host_keys, port=job.port, job_hosts=job.hosts,
                rank_host=job.rank_host, catalogue=catalogue, resolve=resolve_ipv4,
            )  # fmt: skip
        else:
            self._server = CoordinatorServer(
                events, (), welcome, host_keys=host_keys, bind_address=LOOPBACK, port=job.port,
                rank_host=job.rank_host, catalogue=catalogue,
            )  # fmt: skip
        self.port = 0

    def open(self) -> str:
        """Listen; the address ranks report to."""
        self.port = self._server.start()
        master = self._job.master if self._job.workers else LOOPBACK
        return contracts.coordinator_value(master, self.port)

    def wait_for_workers(self, deadline_for: DeadlineFor, *, until_ready: bool) -> dict[str, Hello]:
        """Until every worker host joined (and, ``until_ready``, reported ready); their hello messages."""
        workers = self._job.workers
        if not workers:
            return {}
        log.info("waiting for %s to join at port %d", ", ".join(workers), self.port)
        deadline = deadline_for(f"worker hosts to join master host {self._job.master} on port {self.port}")
        return wait_for_hosts(self._events, workers, until_ready=until_ready, deadline=deadline)

    def wait_until_ready(self, deadline_for: DeadlineFor) -> None:
        """Once every worker joined (``wait_for_workers``): until every one of them reported ready."""
        workers = self._job.workers
        if workers:
            deadline = deadline_for(f"worker hosts to report ready to master host {self._job.master}")
            wait_for_hosts(self._events, workers, until_ready=True, deadline=deadline)

    def send_to(self, host: str, message: WireMessage) -> None:
        """Send ``message`` to a joined worker (OSError when its connection broke)."""
        self._server.send_to(host, message)

    def member_addresses(self) -> tuple[str, ...]:
        """The address every joined worker proved membership from, and this host's as they reached it."""
        return self._server.member_addresses()

    def share_members(self) -> tuple[str, ...]:
        """Once every worker has joined: send each of them the job's members (``member_addresses``); the
        same addresses, for this host's own list."""
        members = self.member_addresses()
        for worker in self._job.workers:
            try:
                self._server.send_to(worker, Members(members))
            except OSError:
                raise PlatformError(
                    f"lost host {worker}: its connection to the coordinator closed before it had the "
                    "addresses of the job's hosts"
                ) from None
        return members

    def wait_until_disconnected(self, deadline: Deadline) -> list[str]:
        """Wait for every worker to close its connection (it has what it waited for); those still
        connected."""
        return self._server.wait_until_disconnected(deadline)

    def deliver(
        self, verdict: Verdict, stop: Deadline | None, seconds: float = VERDICT_DELIVERY_SECONDS
    ) -> list[str]:
        """Send the (final) verdict to every host, wait up to ``seconds`` (within ``stop``) for them to
        confirm, close; the hosts that did not confirm."""
        activity = "workers to receive the verdict"
        deadline = Deadline(seconds, activity) if stop is None else stop.part(seconds, activity)
        self._server.broadcast(verdict)
        still = self._server.wait_until_disconnected(deadline)
        if still:
            log.warning("hosts %s did not confirm the verdict", ", ".join(still))
        self._server.close()
        return still

    def close(self) -> None:
        self._server.close()


class WorkerCoordinator:
    """A worker's side for one job: its connection to the master's coordinator."""

    def __init__(self, job: JobHosts, events: EventQueue, *, catalogue: Catalogue = CORE) -> None:
        self._job = job
        self._events = events
        self._client = CoordinatorClient(
            events, job.master, job.port, job.current_host, job.membership.host_key(job.current_host),
            job_hosts=job.hosts, catalogue=catalogue,
        )  # fmt: skip
        self.address = contracts.coordinator_value(job.master, job.port)

    def join(self, hello: Hello, deadline_for: DeadlineFor) -> Welcome:
        """Join the master, retrying while it is not up yet; the master's welcome."""
        job = self._job
        activity = f"master host {job.master} to accept this host on port {job.port}"
        return self._client.join(hello, deadline_for(activity))

    def send(self, message: WireMessage) -> None:
        self._client.send(message)

    def receive(self, deadline: Deadline) -> WireMessage | None:
        """The master's next message, before ``listen``; None when the connection ended or ``deadline``
        passed."""
        return self._client.receive(deadline)

    def receive_members(self, deadline_for: DeadlineFor) -> tuple[str, ...]:
        """The job's members, which the master sends once every host has joined (before ``listen``). A
        master that ended the job meanwhile: its verdict (JobFailedEarly)."""
        master = self._job.master
        deadline = deadline_for(f"master host {master} to send the addresses of the job's hosts")
        message = self._client.receive(deadline)
        if isinstance(message, Members):
            return message.addresses
        if isinstance(message, JobVerdict):
            raise JobFailedEarly(message.verdict)
        if deadline.expired():
            raise PlatformError(deadline.timeout_message())
        raise PlatformError(
            f"lost contact with master host {master} before it sent the addresses of the job's hosts"
        )

    def listen(self) -> None:
        """From now on the master's verdict, or its loss, arrives as an event."""
        self._client.listen()

    def wait_for_verdict(self, on_exit: Callable[[ProcessExited], Verdict | None]) -> Verdict:
        """Until the master's verdict, or its loss. ``on_exit`` says what the exit of a process of this
        host means: a verdict ends the wait, None lets it go on."""
        while True:
            event = self._events.get()
            verdict = verdict_from_master(event, self._job.master)
            if verdict is None and isinstance(event, ProcessExited):
                verdict = on_exit(event)
            if verdict is not None:
                return verdict

    def close(self) -> None:
        self._client.close()
