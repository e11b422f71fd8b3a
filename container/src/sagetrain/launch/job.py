"""What every engine needs: the job spec, starting the program through the rank launcher, verdicts."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError, UserError
from sagetrain.launch.events import (
    EventQueue,
    HostJoined,
    HostLost,
    HostReady,
    HostRejected,
    ProcessExited,
)
from sagetrain.launch.process import ManagedProcess
from sagetrain.plan.model import Plan
from sagetrain.report.verdict import SUCCESS, RankFailure, Verdict

VERDICT_DELIVERY_SECONDS = 5.0


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


def start_program(
    spec: JobSpec, env: Mapping[str, str], events: EventQueue, name: str = "program"
) -> ManagedProcess:
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


def wait_for_hosts(
    events: EventQueue, hosts: tuple[str, ...], *, until_ready: bool, deadline: Deadline
) -> dict[str, dict]:
    """Until every host joined (and, for MPI, reported ready); their hello messages."""
    hellos: dict[str, dict] = {}
    ready: set[str] = set()
    waiting = set(hosts)
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
            ready.add(event.host)
            waiting.discard(event.host)
        elif isinstance(event, HostLost):
            raise PlatformError(f"lost host {event.host} while the job was starting ({event.reason})")
        elif isinstance(event, HostRejected):
            raise UserError(event.reason)
    return hellos


def stop_registered_ranks(run_dir: Path) -> None:
    """SIGTERM the rank launchers mpirun started on this host (they forward it to their program)."""
    registry = run_dir / "ranks"
    if not registry.is_dir():
        return
    for entry in registry.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGTERM)
