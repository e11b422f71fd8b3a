"""The TF_CONFIG engines: one program per host (plus a parameter server task for PS).

Every non-master host reports how its program ended; the master decides the verdict and broadcasts it.
The engine's ``TfCluster`` (engines.py) says what success is: every host's program (multi-worker
mirrored), or the master's (parameter server: the chief's; TF2 workers usually block in
``server.join()``). Any failure ends the job at once. Parameter server tasks and programs still running
are then stopped, so the job never hangs at its end.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from sagetrain import contracts
from sagetrain.config.resources import host_resource_config
from sagetrain.config.toolkit_env import own_host_variables
from sagetrain.contracts import RankPlace
from sagetrain.deadline import Deadline
from sagetrain.errors import ExitCode, Terminated, exit_code_of_returncode
from sagetrain.launch.coordinator import (
    EventQueue,
    Hello,
    HostChanged,
    HostState,
    MasterCoordinator,
    Outcome,
    ProcessExited,
    WorkerCoordinator,
    coordinator_address,
    failure_of,
)
from sagetrain.launch.lifecycle import EngineRun, stop_grace, stopped_verdict
from sagetrain.launch.members import write_job_members
from sagetrain.launch.process import ManagedProcess, terminate_trees
from sagetrain.launch.programs import start_program, verdict_for_exit
from sagetrain.launch.ps_server import (
    PS_USER,
    parameter_server_env,
    parameter_server_identity,
    prepare_scratch,
)
from sagetrain.launch.rank_output import RankOutput
from sagetrain.launch.spec import JobSpec, env_added
from sagetrain.plan.model import Plan, Role
from sagetrain.plan.tf_config import TF_CONFIG_VAR, TaskType, tf_cluster, tf_config
from sagetrain.report.verdict import SUCCESS, RankFailure, Verdict, root_failure

PS_SERVER_MODULE = "sagetrain.launch.ps_server"
PS_PROCESS = "ps"


def decisive_hosts(plan: Plan) -> tuple[str, ...]:
    """The hosts whose success ends the job successfully."""
    return (plan.master,) if tf_cluster(plan).decided_by_master else plan.hosts


def decide(plan: Plan, outcomes: dict[str, Verdict], failures: Sequence[RankFailure]) -> Verdict | None:
    """The job's verdict from the outcomes and rank failure reports so far; None while it is still
    running. Pure."""
    for verdict in outcomes.values():
        if not verdict.succeeded:
            failure = root_failure(failures)
            return failure.verdict() if failure is not None else verdict
    if all(host in outcomes for host in decisive_hosts(plan)):
        return SUCCESS
    return None


def program_env(spec: JobSpec, coordinator: str, host: str) -> dict[str, str]:
    """The environment of ``host``'s program (one per host). Pure; the dry run prints the same."""
    plan = spec.plan
    place = RankPlace(rank=plan.hosts.index(host), size=len(plan.hosts), local_rank=0, local_size=1)
    return {
        **spec.env,
        TF_CONFIG_VAR: json.dumps(tf_config(plan, host)),
        contracts.COORDINATOR_VAR: coordinator,
        **place.to_env(),
    }


def ps_task_env(spec: JobSpec, host: str) -> dict[str, str]:
    """The parameter server task's environment on ``host``. Pure; the dry run prints the same."""
    tf_config_value = json.dumps(tf_config(spec.plan, host, TaskType.PS))
    return parameter_server_env(spec.env, tf_config_value, spec.run_dir.ps_scratch)


def start_parameter_server(spec: JobSpec, events: EventQueue) -> ManagedProcess:
    """This host's parameter server task: its own user, its own scratch folder, none of the job's
    credentials or secrets. Its output is passed on as a rank's is, so TensorFlow's early INFO records go
    with the job's log level there too; its exit is posted to ``events``."""
    identity = parameter_server_identity()
    prepare_scratch(spec.run_dir.ps_scratch, identity)
    env = ps_task_env(spec, spec.plan.current_host)
    ps = ManagedProcess.start(
        [spec.python, "-m", PS_SERVER_MODULE],
        name=PS_PROCESS,
        env=env,
        cwd=spec.run_dir.ps_scratch,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        run_as=identity,
    )
    output = RankOutput.of_program(ps.popen, "", env)

    def exited(process: ManagedProcess, code: int) -> None:
        try:
            # A task serves until it is stopped, at the job's end: its shutdown records are not news then.
            output.finish(0 if code == exit_code_of_returncode(-signal.SIGTERM) else code)
        finally:
            events.put(ProcessExited(process.name, code))

    ps.on_exit(exited)
    return ps


def exit_outcome(spec: JobSpec, process: str, exit_code: int) -> Verdict:
    """How this host's part ended when one of its processes exited: a parameter server task never ends
    on its own, so its exit is a failure whatever its code."""
    if process == PS_PROCESS:
        what = f"the parameter server task on host {spec.plan.current_host}"
        return verdict_for_exit(spec, exit_code or 1, None, what=what)
    return verdict_for_exit(spec, exit_code, None)


class _TfConfigHost:
    """What master and workers share: this host's program and parameter server task."""

    def __init__(self, spec: JobSpec) -> None:
        self._spec = spec
        self._events = EventQueue()
        self._address = ""  # where this host's program reports
        self._processes: list[ManagedProcess] = []

    def start(self) -> None:
        spec = self._spec
        if tf_cluster(spec.plan).parameter_servers:
            self._processes.append(start_parameter_server(spec, self._events))
        env = program_env(spec, self._address, spec.plan.current_host)
        self._processes.append(start_program(spec, env, self._events))

    def _stop_processes(self, stop: Deadline) -> None:
        # All at once: the program must not outlive its parameter server by a whole grace period.
        terminate_trees(self._processes, grace=stop_grace(stop))

    def clean_up(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.terminate_tree()


class TfConfigMaster(_TfConfigHost):
    def __init__(self, spec: JobSpec) -> None:
        super().__init__(spec)
        self._coordinator = MasterCoordinator(spec.job_hosts, self._events)

    def prepare(self) -> None:
        self._address = self._coordinator.open()
        self._coordinator.wait_for_workers(self._spec.worker_wait, until_ready=False)
        # Before this host's program and parameter server open their ports; each worker writes its own
        # before it starts its own.
        write_job_members(self._spec.members_filter, self._spec.run_dir, self._coordinator.share_members())

    def wait(self) -> Verdict:
        plan = self._spec.plan
        outcomes: dict[str, Verdict] = {}
        failures: list[RankFailure] = []
        while True:
            event = self._events.get()
            failure = failure_of(event)
            if failure is not None:
                failures.append(failure)
            elif isinstance(event, ProcessExited):
                outcome = exit_outcome(self._spec, event.name, event.exit_code)
                # The program's own outcome wins over its parameter server's end that it caused.
                outcomes[plan.current_host] = (
                    outcomes.get(plan.current_host, outcome) if event.name == PS_PROCESS else outcome
                )
            elif isinstance(event, HostChanged) and event.host not in outcomes:
                lost = self._host_outcome(event, outcomes)
                if lost is not None:
                    return lost
            verdict = decide(plan, outcomes, failures)
            if verdict is not None:
                return verdict

    @staticmethod
    def _host_outcome(event: HostChanged, outcomes: dict[str, Verdict]) -> Verdict | None:
        """Record a worker's outcome; the job's verdict when the worker is lost before it had one."""
        if event.state is HostState.DONE and event.verdict is not None:
            outcomes[event.host] = event.verdict
        elif event.state is HostState.LOST:
            return Verdict(ExitCode.PLATFORM_ERROR, f"lost host {event.host} ({event.reason})")
        return None

    def stop(self, stopped: Terminated, stop: Deadline) -> Verdict:
        self._stop_processes(stop)
        if not self._processes:
            return Verdict(stopped.exit_code, stopped.cause)
        # Every host's program reports to this coordinator.
        return stopped_verdict(stopped, self._events, [], stop, self._spec.checkpoints)

    def deliver(self, verdict: Verdict, stop: Deadline | None) -> None:
        self._coordinator.deliver(verdict, stop)


class TfConfigWorker(_TfConfigHost):
    def __init__(self, spec: JobSpec) -> None:
        super().__init__(spec)
        self._coordinator = WorkerCoordinator(spec.job_hosts, self._events)

    def prepare(self) -> None:
        self._coordinator.join(Hello(), self._spec.worker_wait)
        members = self._coordinator.receive_members(self._spec.worker_wait)
        write_job_members(self._spec.members_filter, self._spec.run_dir, members)
        self._coordinator.listen()
        self._address = self._coordinator.address

    def wait(self) -> Verdict:
        def report_outcome(exited: ProcessExited) -> None:
            outcome = exit_outcome(self._spec, exited.name, exited.exit_code)
            self._coordinator.send(Outcome(outcome))

        return self._coordinator.wait_for_verdict(report_outcome)

    def stop(self, stopped: Terminated, stop: Deadline) -> Verdict:
        """A worker's program is this entry's child, which waits for it: no other host's program runs
        here, so this host reports its own stop."""
        self._stop_processes(stop)
        return Verdict(stopped.exit_code, stopped.cause)

    def clean_up(self) -> None:
        super().clean_up()
        self._coordinator.close()

    def deliver(self, verdict: Verdict, stop: Deadline | None) -> None:
        """Nothing: the master delivers."""


def make_run(spec: JobSpec) -> EngineRun:
    return TfConfigMaster(spec) if spec.plan.role is Role.MASTER else TfConfigWorker(spec)


def describe(spec: JobSpec, environ: Mapping[str, str]) -> dict[str, Any]:
    """What the dry run shows: every host's program, as that host's rank launcher leaves it (its own
    identity and resource config), and its parameter server task."""
    plan = spec.plan
    coordinator = coordinator_address(plan, plan.launch.coordinator_port if plan.multi_host else 0)
    launch: dict[str, Any] = {}
    for host in plan.hosts:
        env = program_env(spec, coordinator, host)
        own_config = host_resource_config(json.loads(env["SM_RESOURCE_CONFIG"]), host)
        env.update(own_host_variables(env, host, own_config))
        launch[host] = {"command": spec.rank_argv, "env": env_added(env, environ)}
        if tf_cluster(plan).parameter_servers:
            launch[host]["parameter_server"] = {
                "command": [spec.python, "-m", PS_SERVER_MODULE],
                "user": PS_USER,
                "env": ps_task_env(spec, host),
            }
    return launch
