"""One process on this host (single engine, and hosts outside the distribution instance groups)."""

from __future__ import annotations

from sagetrain.errors import SagetrainError, Terminated
from sagetrain.launch.coordinator import CoordinatorServer
from sagetrain.launch.events import EventQueue, ProcessExited, RankFailed
from sagetrain.launch.job import (
    JobSpec,
    Report,
    start_program,
    stop_deadline,
    stop_grace,
    stopped_verdict,
    verdict_for_exit,
)
from sagetrain.launch.process import ManagedProcess
from sagetrain.report.verdict import RankFailure, Verdict


def single_env(spec: JobSpec, coordinator_port: int) -> dict[str, str]:
    """The program's environment. Pure; the dry run prints the same."""
    return {
        **spec.env,
        "SAGETRAIN_COORDINATOR": f"127.0.0.1:{coordinator_port}",
        "SAGETRAIN_RANK": "0",
        "SAGETRAIN_LOCAL_RANK": "0",
        "SAGETRAIN_SIZE": "1",
        "SAGETRAIN_LOCAL_SIZE": "1",
    }


def run_single(spec: JobSpec, report: Report) -> Verdict:
    events = EventQueue()
    # Only for the rank launcher's failure report: loopback, any free port.
    server = CoordinatorServer(events, (), lambda hello: {}, bind_address="127.0.0.1", port=0)
    port = server.start()
    program: ManagedProcess | None = None
    failures: list[RankFailure] = []
    try:
        try:
            program = start_program(spec, single_env(spec, port), events)
            verdict = _program_verdict(spec, events, failures)
        except Terminated as stopped:
            stop = stop_deadline()
            if program is not None:
                program.terminate_tree(grace=stop_grace(stop))
            verdict = stopped_verdict(stopped, events, failures, stop)
        except SagetrainError as error:
            verdict = Verdict(error.exit_code, error.cause)
        return report(verdict)
    finally:
        if program is not None and program.poll() is None:
            program.terminate_tree()
        server.close()


def _program_verdict(spec: JobSpec, events: EventQueue, failures: list[RankFailure]) -> Verdict:
    while True:
        event = events.get()
        if isinstance(event, RankFailed):
            failures.append(event.failure)
        elif isinstance(event, ProcessExited):
            return verdict_for_exit(spec, event.exit_code, failures[0] if failures else None)
