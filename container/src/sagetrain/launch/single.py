"""One process on this host (single engine, and hosts outside the distribution instance groups)."""

from __future__ import annotations

from sagetrain.errors import SagetrainError
from sagetrain.launch.coordinator import CoordinatorServer
from sagetrain.launch.events import EventQueue, ProcessExited, RankFailed
from sagetrain.launch.job import JobSpec, start_program, verdict_for_exit
from sagetrain.launch.process import ManagedProcess
from sagetrain.report.verdict import RankFailure, Verdict


def run_single(spec: JobSpec) -> Verdict:
    events = EventQueue()
    # Only for the rank launcher's failure report: loopback, any free port.
    server = CoordinatorServer(events, (), lambda hello: {}, bind_address="127.0.0.1", port=0)
    port = server.start()
    env = {
        **spec.env,
        "SAGETRAIN_COORDINATOR": f"127.0.0.1:{port}",
        "SAGETRAIN_RANK": "0",
        "SAGETRAIN_LOCAL_RANK": "0",
        "SAGETRAIN_SIZE": "1",
        "SAGETRAIN_LOCAL_SIZE": "1",
    }
    program: ManagedProcess | None = None
    failure: RankFailure | None = None
    try:
        program = start_program(spec, env, events)
        while True:
            event = events.get()
            if isinstance(event, RankFailed):
                failure = failure or event.failure
            elif isinstance(event, ProcessExited):
                return verdict_for_exit(spec, event.exit_code, failure)
    except SagetrainError as error:
        return Verdict(error.exit_code, error.cause)
    finally:
        if program is not None and program.poll() is None:
            program.terminate_tree()
        server.close()
