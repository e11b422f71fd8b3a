"""One lifecycle for every engine on every host, and the interface an engine implements for it.

    prepare → start → wait ─────────────────────────┐
       │ SIGTERM (Terminated)                       │ a verdict, or a SagetrainError
       └──► provisional report → stop (within the   │
            plan's stop window) ────────────────────┤
                                                    ▼
             report (the verdict is final and written) → clean_up → deliver

The verdict is reported before anything is stopped and before the other hosts learn it: from then on a
stop signal changes nothing (report/job_end.py), and a host that exits on the verdict cannot make the
job look stopped. On SIGTERM a provisional report is written at once, so a SIGKILL that comes before the
window ends still leaves one. An engine only supplies the steps (``EngineRun``); the order lives here.
"""

from __future__ import annotations

from typing import Protocol

from sagetrain.deadline import Deadline
from sagetrain.errors import SagetrainError, Terminated
from sagetrain.launch.coordinator import EventQueue, JobFailedEarly, failure_of
from sagetrain.plan.stop import StopWindow
from sagetrain.report.saved_files import CheckpointFolder
from sagetrain.report.verdict import RankFailure, Verdict

# From SIGTERM to exit, the whole stop path (the ranks' wind-down, stopping mpirun or the program, the
# ranks' reports, the verdict's delivery) is one deadline: the plan's stop window (plan/stop.py).
# The part of it kept, once the programs were stopped, for the ranks' reports and the verdict's delivery.
STOP_RESERVE_SECONDS = 2.0
# After a stopped program exited, how long its rank launchers' reports may still be on their way.
STOP_REPORT_SECONDS = 1.0


class Reports(Protocol):
    """Where this host's report is written (report/job_end.py)."""

    def report(self, verdict: Verdict) -> Verdict:
        """Make ``verdict`` final and write it; the final verdict (the first one reported)."""

    def provisional(self, verdict: Verdict) -> None:
        """Write ``verdict`` now, for the final one to replace."""


class EngineRun(Protocol):
    """One host's part of a job on one engine: the steps ``run_engine`` calls, in its order."""

    def prepare(self) -> None:
        """Before any program runs: the coordinator, the other hosts, sshd."""

    def start(self) -> None:
        """Start what runs the program here (the program, mpirun; nothing on an MPI worker)."""

    def wait(self) -> Verdict:
        """Until the job's verdict is known."""

    def stop(self, stopped: Terminated, stop: Deadline) -> Verdict:
        """After SIGTERM: stop what runs, within ``stop``; the verdict of the stopped job."""

    def clean_up(self) -> None:
        """End what still runs, once the verdict is final (also after an error of ours)."""

    def deliver(self, verdict: Verdict, stop: Deadline | None) -> None:
        """Tell the other hosts the final verdict (the master), within ``stop`` when stopping."""


def verdict_of_error(error: SagetrainError) -> Verdict:
    if isinstance(error, JobFailedEarly):
        return error.verdict
    return Verdict(error.exit_code, error.cause)


def run_engine(run: EngineRun, reports: Reports, window: StopWindow) -> Verdict:
    """Run this host's part of the job; the final verdict (for a worker: the master's)."""
    stop: Deadline | None = None
    try:
        try:
            run.prepare()
            run.start()
            verdict = run.wait()
        except Terminated as stopped:
            stop = stop_deadline(window)
            reports.provisional(stopping_verdict(stopped, window))
            verdict = run.stop(stopped, stop)
        except SagetrainError as error:
            verdict = verdict_of_error(error)
        verdict = reports.report(verdict)
    finally:
        run.clean_up()
    run.deliver(verdict, stop)
    return verdict


def stop_deadline(window: StopWindow) -> Deadline:
    """The deadline of the whole stop path, started when the stop signal arrived."""
    return Deadline(window.seconds, "the job to stop after the stop signal")


def stopping_verdict(stopped: Terminated, window: StopWindow) -> Verdict:
    """What the report says while the programs are stopping."""
    return Verdict(
        stopped.exit_code,
        f"{stopped.cause}; the programs had up to {window.seconds:g} s to save their work and end "
        f"({window.reason}), and the container was killed before they did",
    )


def stop_grace(stop: Deadline) -> float:
    """How long a stopped program may take to end before it is killed: ``stop`` less its reserve."""
    return stop.part(stop.seconds, "the program to stop", reserve=STOP_RESERVE_SECONDS).remaining()


def stopped_verdict(
    stopped: Terminated,
    events: EventQueue,
    failures: list[RankFailure],
    stop: Deadline,
    checkpoints: CheckpointFolder,
) -> Verdict:
    """The verdict of a job stopped by a signal, once its program has exited: our sentence, then what a
    rank said about the stop (the managed trainer: the checkpoint it wrote, and which rank wrote it),
    else what the programs wrote to this host's checkpoint folder after the signal. The ranks' reports
    are awaited briefly; the lowest rank that said something is quoted."""
    said = [failure for failure in failures if failure.message]
    deadline = stop.part(STOP_REPORT_SECONDS, "the ranks' reports on the stop")
    while not any(failure.rank == 0 for failure in said):
        event = events.get(deadline)
        if event is None:
            break
        failure = failure_of(event)
        if failure is not None and failure.message:
            said.append(failure)
    if not said:
        note = checkpoints.saved_since(stopped.signalled_at)
        return Verdict(stopped.exit_code, f"{stopped.cause}; {note}" if note else stopped.cause)
    first = min(said, key=lambda failure: failure.rank)
    who = f"rank {first.rank} (host {first.host})"
    # The managed trainer's account names its rank and host itself.
    account = first.message if first.message.startswith(who) else f"{who}: {first.message}"
    return Verdict(stopped.exit_code, f"{stopped.cause}; {account}")
