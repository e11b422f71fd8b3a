"""The single engine: one process on this host (also hosts outside the distribution instance groups).
A loopback coordinator takes the rank launcher's failure report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sagetrain import contracts
from sagetrain.contracts import ONE_PROCESS
from sagetrain.deadline import Deadline
from sagetrain.errors import Terminated
from sagetrain.launch.coordinator import (
    LOOPBACK,
    EventQueue,
    MasterCoordinator,
    ProcessExited,
    failure_of,
)
from sagetrain.launch.lifecycle import stop_grace, stopped_verdict
from sagetrain.launch.members import write_job_members
from sagetrain.launch.process import ManagedProcess
from sagetrain.launch.programs import start_program, verdict_for_exit
from sagetrain.launch.spec import JobSpec, env_added
from sagetrain.report.verdict import RankFailure, Verdict

# Shown where the coordinator's port is chosen at start: any free loopback port.
PORT_CHOSEN_AT_START = 0


def single_env(spec: JobSpec, coordinator: str) -> dict[str, str]:
    """The program's environment. Pure; the dry run prints the same."""
    return {**spec.env, contracts.COORDINATOR_VAR: coordinator, **ONE_PROCESS.to_env()}


class SingleRun:
    def __init__(self, spec: JobSpec) -> None:
        self._spec = spec
        self._events = EventQueue()
        self._coordinator = MasterCoordinator(spec.job_hosts, self._events)
        self._address = ""
        self._program: ManagedProcess | None = None
        self._failures: list[RankFailure] = []

    def prepare(self) -> None:
        self._address = self._coordinator.open()
        # Before the program opens a port: this host is the job's only one.
        write_job_members(self._spec.members_filter, self._spec.run_dir, ())

    def start(self) -> None:
        self._program = start_program(self._spec, single_env(self._spec, self._address), self._events)

    def wait(self) -> Verdict:
        while True:
            event = self._events.get()
            failure = failure_of(event)
            if failure is not None:
                self._failures.append(failure)
            elif isinstance(event, ProcessExited):
                first = self._failures[0] if self._failures else None
                return verdict_for_exit(self._spec, event.exit_code, first)

    def stop(self, stopped: Terminated, stop: Deadline) -> Verdict:
        if self._program is not None:
            self._program.terminate_tree(grace=stop_grace(stop))
        return stopped_verdict(stopped, self._events, self._failures, stop, self._spec.checkpoints)

    def clean_up(self) -> None:
        if self._program is not None and self._program.poll() is None:
            self._program.terminate_tree()

    def deliver(self, verdict: Verdict, stop: Deadline | None) -> None:
        self._coordinator.deliver(verdict, stop)  # no other host: it only closes


def make_run(spec: JobSpec) -> SingleRun:
    return SingleRun(spec)


def describe(spec: JobSpec, environ: Mapping[str, str]) -> dict[str, Any]:
    """What the dry run shows: the program on this host and the environment it gets."""
    env = single_env(spec, contracts.coordinator_value(LOOPBACK, PORT_CHOSEN_AT_START))
    return {"host": spec.plan.current_host, "command": spec.rank_argv, "env": env_added(env, environ)}
