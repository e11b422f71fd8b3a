"""The TF_CONFIG engines: one program per host (plus a parameter server task for PS).

Every non-master host reports how its program ended; the master decides the verdict and broadcasts it.
Multi-worker mirrored needs every host's program to succeed. With parameter servers the chief decides
success (TF2 workers usually block in ``server.join()``); any failure ends the job at once. Parameter
server tasks and programs still running are then stopped, so the job never hangs at its end.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sagetrain.deadline import Deadline
from sagetrain.errors import ExitCode, SagetrainError, Terminated
from sagetrain.launch.coordinator import CoordinatorClient, CoordinatorServer
from sagetrain.launch.events import (
    EventQueue,
    HostLost,
    HostOutcome,
    ProcessExited,
    RankFailed,
)
from sagetrain.launch.job import (
    JobFailedEarly,
    JobSpec,
    Report,
    coordinator_address,
    deliver_verdict,
    delivery_deadline,
    start_program,
    stop_deadline,
    stop_grace,
    stopped_verdict,
    verdict_for_exit,
    verdict_from_master,
    wait_for_hosts,
)
from sagetrain.launch.process import ManagedProcess, terminate_trees
from sagetrain.plan.model import Engine, Plan, Role
from sagetrain.plan.tf_config import TaskType, tf_config
from sagetrain.report.verdict import SUCCESS, RankFailure, Verdict, root_failure

PS_SERVER_MODULE = "sagetrain.launch.ps_server"


def decisive_hosts(plan: Plan) -> tuple[str, ...]:
    """The hosts whose success ends the job successfully."""
    return (plan.master,) if plan.engine is Engine.PARAMETER_SERVER else plan.hosts


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
    return {
        **spec.env,
        "TF_CONFIG": json.dumps(tf_config(plan, host)),
        "SAGETRAIN_COORDINATOR": coordinator,
        "SAGETRAIN_RANK": str(plan.hosts.index(host)),
        "SAGETRAIN_SIZE": str(len(plan.hosts)),
        "SAGETRAIN_LOCAL_RANK": "0",
        "SAGETRAIN_LOCAL_SIZE": "1",
    }


def parameter_server_env(spec: JobSpec, host: str) -> dict[str, str]:
    return {**spec.env, "TF_CONFIG": json.dumps(tf_config(spec.plan, host, TaskType.PS))}


def run_tf_distribute(spec: JobSpec, python: str, report: Report) -> Verdict:
    plan = spec.plan
    events = EventQueue()
    is_master = plan.role is Role.MASTER
    server: CoordinatorServer | None = None
    client: CoordinatorClient | None = None
    processes: list[ManagedProcess] = []
    stop: Deadline | None = None
    try:
        try:
            if is_master:
                bind = ("0.0.0.0", plan.coordinator_port) if plan.multi_host else ("127.0.0.1", 0)
                server = CoordinatorServer(
                    events,
                    plan.workers,
                    lambda hello: {},
                    bind_address=bind[0],
                    port=bind[1],
                    job_hosts=plan.hosts,
                )
                port = server.start()
                coordinator = coordinator_address(plan, port)
                wait_for_hosts(
                    events,
                    plan.workers,
                    until_ready=False,
                    deadline=spec.worker_wait(
                        f"worker hosts to join master host {plan.master} on port {port}"
                    ),
                )
            else:
                client = CoordinatorClient(
                    events, plan.master, plan.coordinator_port, plan.current_host, job_hosts=plan.hosts
                )
                client.join(
                    {},
                    spec.worker_wait(
                        f"master host {plan.master} to accept this host on port {plan.coordinator_port}"
                    ),
                )
                client.listen()
                coordinator = coordinator_address(plan, plan.coordinator_port)
            if plan.engine is Engine.PARAMETER_SERVER:
                ps = ManagedProcess.start(
                    [python, "-m", PS_SERVER_MODULE],
                    name="ps",
                    env=parameter_server_env(spec, plan.current_host),
                )
                ps.on_exit(lambda p, code: events.put(ProcessExited(p.name, code)))
                processes.append(ps)
            processes.append(start_program(spec, program_env(spec, coordinator, plan.current_host), events))
            verdict = _master_loop(spec, events) if is_master else _worker_loop(spec, events, client)
        except JobFailedEarly as failed:
            verdict = failed.verdict
        except Terminated as stopped:
            stop = stop_deadline()
            # All at once: the program must not outlive its parameter server by a whole grace period.
            terminate_trees(processes, grace=stop_grace(stop))
            if is_master and processes:  # every host's program reports to the master's coordinator
                verdict = stopped_verdict(stopped, events, [], stop)
            else:
                verdict = Verdict(stopped.exit_code, stopped.cause)
        except SagetrainError as error:
            verdict = Verdict(error.exit_code, error.cause)
        # Final before the processes still running are stopped and before the workers learn it (a worker
        # exits on it, and SageMaker then stops the other containers): a stop signal changes nothing now.
        verdict = report(verdict)
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate_tree()
        if client is not None:
            client.close()
    if server is not None:
        deliver_verdict(server, verdict, delivery_deadline(stop))
    return verdict


def _master_loop(spec: JobSpec, events: EventQueue) -> Verdict:
    plan = spec.plan
    outcomes: dict[str, Verdict] = {}
    failures: list[RankFailure] = []
    while True:
        event = events.get()
        if isinstance(event, RankFailed):
            failures.append(event.failure)
        elif isinstance(event, ProcessExited):
            if event.name == "ps":
                what = f"the parameter server task on host {plan.current_host}"
                outcomes.setdefault(
                    plan.current_host, verdict_for_exit(spec, event.exit_code or 1, None, what=what)
                )
            else:
                outcomes[plan.current_host] = verdict_for_exit(spec, event.exit_code, None)
        elif isinstance(event, HostOutcome):
            outcomes.setdefault(event.host, event.verdict)
        elif isinstance(event, HostLost) and event.host not in outcomes:
            return Verdict(ExitCode.PLATFORM_ERROR, f"lost host {event.host} ({event.reason})")
        verdict = decide(plan, outcomes, failures)
        if verdict is not None:
            return verdict


def _worker_loop(spec: JobSpec, events: EventQueue, client: CoordinatorClient | None) -> Verdict:
    assert client is not None
    plan = spec.plan
    while True:
        event = events.get()
        verdict = verdict_from_master(event, plan)
        if verdict is not None:
            return verdict
        if isinstance(event, ProcessExited):
            what = f"the parameter server task on host {plan.current_host}" if event.name == "ps" else None
            outcome = verdict_for_exit(spec, event.exit_code or (1 if what else 0), None, what=what)
            client.send({"type": "outcome", "verdict": outcome.to_message()})
