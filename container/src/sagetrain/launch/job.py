"""What every engine needs: the job spec, starting the program through the rank launcher, verdicts."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sagetrain.deadline import Deadline
from sagetrain.errors import ExitCode, PlatformError, SagetrainError, Terminated, UserError
from sagetrain.launch.coordinator import CoordinatorServer
from sagetrain.launch.events import (
    Event,
    EventQueue,
    HostJoined,
    HostLost,
    HostOutcome,
    HostReady,
    HostRejected,
    MasterLost,
    ProcessExited,
    RankFailed,
    VerdictReceived,
)
from sagetrain.launch.process import TERMINATION_GRACE_SECONDS, ManagedProcess
from sagetrain.plan.model import Plan
from sagetrain.report.verdict import SUCCESS, RankFailure, Verdict, root_failure

log = logging.getLogger(__name__)

VERDICT_DELIVERY_SECONDS = 5.0
# From SIGTERM to exit, the whole stop path (the ranks' wind-down, stopping mpirun or the program, the
# ranks' reports, the verdict's delivery) is one deadline: SageMaker's local mode SIGKILLs 10 s after SIGTERM.
STOP_SECONDS = 8.0
# The part of it kept, once the programs were stopped, for the ranks' reports and the verdict's delivery.
STOP_RESERVE_SECONDS = 2.0
# After a stopped program exited, how long its rank launchers' reports may still be on their way.
STOP_REPORT_SECONDS = 1.0
# After mpirun failed with no rank to blame, how long a host's lost connection may take to be noticed.
LOST_HOST_NOTICE_SECONDS = 2.0


# Makes a verdict final and writes the report; returns the final verdict (the first one reported). Every
# engine calls it as soon as it has decided, before it stops what still runs and before the other hosts
# learn the verdict: from then on a stop signal changes nothing (entry.py, JobEnd).
Report = Callable[[Verdict], Verdict]


@dataclass(frozen=True)
class JobSpec:
    plan: Plan
    program_name: str
    program_argv: tuple[str, ...]
    env: Mapping[str, str]  # the job environment every user process gets
    rank_launcher: tuple[str, ...]  # argv prefix; the program's argv follows
    run_dir: Path
    code_dir: Path
    interface: str  # resolved on this host

    def worker_wait(self, activity: str) -> Deadline:
        return Deadline(
            self.plan.worker_wait_seconds,
            activity,
            hint="if hosts start slowly, raise the hyperparameter sagetrain_worker_wait_seconds",
        )

    def launch_wait(self, activity: str) -> Deadline:
        return Deadline(
            self.plan.launch_wait_seconds,
            activity,
            hint="if ranks start slowly, raise the hyperparameter sagetrain_launch_wait_seconds",
        )


def stop_deadline() -> Deadline:
    """The deadline of the whole stop path, started when the stop signal arrived."""
    return Deadline(STOP_SECONDS, "the job to stop after the stop signal")


def stop_grace(stop: Deadline) -> float:
    """How long a stopped program may take to end before it is killed, within ``stop``."""
    grace = stop.part(TERMINATION_GRACE_SECONDS, "the program to stop", reserve=STOP_RESERVE_SECONDS)
    return grace.remaining()


def deliver_verdict(server: CoordinatorServer, verdict: Verdict, deadline: Deadline) -> None:
    """Send the (final) verdict to every host, wait until ``deadline`` for them to confirm, close."""
    server.broadcast(verdict)
    still = server.wait_until_disconnected(deadline)
    if still:
        log.warning("hosts %s did not confirm the verdict", ", ".join(still))
    server.close()


def delivery_deadline(stop: Deadline | None) -> Deadline:
    activity = "workers to receive the verdict"
    if stop is None:
        return Deadline(VERDICT_DELIVERY_SECONDS, activity)
    return stop.part(VERDICT_DELIVERY_SECONDS, activity)


def verdict_from_master(event: Event, plan: Plan) -> Verdict | None:
    """For a worker: the verdict the master sent, a failure when the master is gone, else None."""
    if isinstance(event, VerdictReceived):
        return event.verdict
    if isinstance(event, MasterLost):
        return Verdict(
            ExitCode.PLATFORM_ERROR, f"lost contact with master host {plan.master} ({event.reason})"
        )
    return None


def coordinator_address(plan: Plan, port: int) -> str:
    """Where ranks report failures (SAGETRAIN_COORDINATOR): the master's coordinator port; on one host,
    a loopback port chosen at start."""
    return f"{plan.master}:{port}" if plan.multi_host else f"127.0.0.1:{port}"


def start_program(
    spec: JobSpec, env: Mapping[str, str], events: EventQueue, name: str = "program"
) -> ManagedProcess:
    # Should this entry die, the rank launcher ends its program itself (launch/rank.py, end_with_parent).
    process = ManagedProcess.start(
        [*spec.rank_launcher, *spec.program_argv], name=name, env=env, cwd=spec.code_dir
    )
    process.on_exit(lambda p, code: events.put(ProcessExited(p.name, code)))
    return process


def verdict_for_exit(
    spec: JobSpec, exit_code: int, failure: RankFailure | None, what: str | None = None
) -> Verdict:
    """The verdict once the program (or mpirun) ended with ``exit_code``."""
    if exit_code == 0:
        return SUCCESS
    if failure is not None:
        return failure.verdict()
    what = what or f"{spec.program_name} on host {spec.plan.current_host}"
    if exit_code > 128:
        return Verdict(exit_code, f"{what} was killed by signal {exit_code - 128}")
    return Verdict(exit_code, f"{what} exited with code {exit_code}")


class JobFailedEarly(SagetrainError):
    """A host's program failed while the master was still waiting for other hosts to join."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.cause)
        self.verdict = verdict
        self.exit_code = verdict.exit_code


def wait_for_hosts(
    events: EventQueue, hosts: tuple[str, ...], *, until_ready: bool, deadline: Deadline
) -> dict[str, dict]:
    """Until every host joined (and, for MPI, reported ready); their hello messages.

    Hosts that joined may already run their program (TF_CONFIG engines): a failed outcome ends the wait
    at once, and every other event that is not about joining is put back for the job's own loop."""
    hellos: dict[str, dict] = {}
    waiting = set(hosts)
    deferred: list[Event] = []
    failures: list[RankFailure] = []
    try:
        while waiting:
            event = events.get(deadline)
            if event is None:
                missing = ", ".join(sorted(waiting))
                raise PlatformError(deadline.timeout_message(f"still missing: {missing}"))
            if isinstance(event, HostJoined):
                hellos[event.host] = event.hello
                if not until_ready:
                    waiting.discard(event.host)
            elif isinstance(event, HostReady):
                waiting.discard(event.host)
            elif isinstance(event, HostLost):
                raise PlatformError(f"lost host {event.host} while the job was starting ({event.reason})")
            elif isinstance(event, HostRejected):
                raise UserError(event.reason)
            elif isinstance(event, HostOutcome) and not event.verdict.succeeded:
                root = root_failure(failures)
                raise JobFailedEarly(root.verdict() if root is not None else event.verdict)
            else:
                if isinstance(event, RankFailed):
                    failures.append(event.failure)
                deferred.append(event)
    finally:
        for event in deferred:
            events.put(event)
    return hellos


def stopped_verdict(
    stopped: Terminated, events: EventQueue, failures: list[RankFailure], stop: Deadline
) -> Verdict:
    """The verdict of a job stopped by a signal, once its program has exited: our sentence, then what a
    rank said about the stop (the managed trainer says where it wrote its checkpoint)."""
    said = [failure for failure in failures if failure.message]
    deadline = stop.part(STOP_REPORT_SECONDS, "the ranks' reports on the stop")
    while not said:
        event = events.get(deadline)
        if event is None:
            break
        if isinstance(event, RankFailed) and event.failure.message:
            said.append(event.failure)
    if not said:
        return Verdict(stopped.exit_code, stopped.cause)
    first = said[0]
    return Verdict(
        stopped.exit_code, f"{stopped.cause}; rank {first.rank} (host {first.host}): {first.message}"
    )


def lost_host_behind(events: EventQueue, failures: list[RankFailure]) -> HostLost | None:
    """After mpirun failed: the lost host that explains it, if one is reported within
    LOST_HOST_NOTICE_SECONDS. Only asked when no rank failed on its own: a host that dies takes mpirun
    down at once, and the ranks it leaves report knock-on failures, often before its connection to the
    coordinator is seen to close. Rank reports that arrive meanwhile are added to ``failures``."""
    deadline = Deadline(LOST_HOST_NOTICE_SECONDS, "a lost host to be noticed")
    while (event := events.get(deadline)) is not None:
        if isinstance(event, HostLost):
            return event
        if isinstance(event, RankFailed):
            failures.append(event.failure)
            if not event.failure.is_knock_on():
                return None
    return None


def signal_registered_ranks(run_dir: Path, signum: int = signal.SIGTERM) -> None:
    """Signal the ranks started on this host: each rank launcher's process group, which holds its
    program (mpirun makes every rank a group leader); a launcher that leads no group, and its program,
    one by one. After SIGKILL the registration goes too."""
    registry = run_dir / "ranks"
    if not registry.is_dir():
        return
    for entry in registry.iterdir():
        if not entry.name.isdigit():
            continue
        launcher = int(entry.name)
        try:
            if os.getpgid(launcher) == launcher:
                os.killpg(launcher, signum)
            else:
                os.kill(launcher, signum)
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(entry.read_text().strip()), signum)
        except (ProcessLookupError, PermissionError):
            pass  # gone already
        if signum == signal.SIGKILL:
            entry.unlink(missing_ok=True)
