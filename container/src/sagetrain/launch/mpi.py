"""The Horovod/MPI engine: mpirun on the master host, sshd on the others.

Master: coordinator up → every worker joined with its sshd host key and reported ready (our key is in
its authorized_keys) → known_hosts written → mpirun → every rank said it started (bounded by
sagetrain_launch_wait_seconds) → mpirun ends (or a host is lost, or the start timed out) → verdict
reported here → mpirun stopped if still running → verdict broadcast.
Worker: host key → sshd → join the master → authorize its key → ready → wait for the verdict, or fail
when the master is gone. On SIGTERM a worker signals its ranks and still waits for the master's verdict
(within the stop deadline): its ranks' stop is a collective with the others (rank 0's checkpoint), which
needs this host, its sshd and mpirun's daemon up until the ranks have ended.
"""

from __future__ import annotations

import logging
import shlex
import signal

from sagetrain.deadline import Deadline
from sagetrain.errors import ExitCode, PlatformError, SagetrainError, Terminated
from sagetrain.launch.coordinator import CoordinatorClient, CoordinatorServer
from sagetrain.launch.events import (
    EventQueue,
    HostLost,
    MasterLost,
    ProcessExited,
    RankFailed,
    RankStarted,
    VerdictReceived,
)
from sagetrain.launch.job import (
    STOP_SECONDS,
    JobSpec,
    Report,
    coordinator_address,
    deliver_verdict,
    delivery_deadline,
    lost_host_behind,
    signal_registered_ranks,
    stop_deadline,
    stopped_verdict,
    verdict_for_exit,
    verdict_from_master,
    wait_for_hosts,
)
from sagetrain.launch.process import TERMINATION_GRACE_SECONDS, ManagedProcess
from sagetrain.launch.sshd import (
    SshFiles,
    generate_key,
    known_hosts_text,
    start_sshd,
    write_authorized_key,
)
from sagetrain.plan.model import Plan
from sagetrain.plan.mpi_command import SshSetup, forwarded_env_names, mpirun_command, option_keys
from sagetrain.report.verdict import RankFailure, Verdict, root_failure

log = logging.getLogger(__name__)

SSHD_START_SECONDS = 60.0
# Parts of the stop path's one deadline (launch/job.py, STOP_SECONDS). The ranks wind down first (the
# managed trainer finishes its step and checkpoints) while this much of it is kept for what follows:
# stopping mpirun, the ranks' reports, the verdict's delivery. mpirun is stopped only after the ranks had
# their time: on SIGTERM it SIGKILLs its ranks a second later, which would cut a checkpoint short.
AFTER_RANKS_STOP_SECONDS = 2.5
MPIRUN_STOP_SECONDS = 1.5


def stop_job(spec: JobSpec, mpirun: ManagedProcess, stop: Deadline) -> None:
    """On SIGTERM: signal this host's ranks (their launchers' process groups); a rank that ends makes
    mpirun end the job on every host, and the launchers report how their program ended. mpirun is
    signalled only if the job outlives the ranks' part of ``stop``; what is left of this host's ranks
    then (mpirun may be killed before it killed them) is killed."""
    signal_registered_ranks(spec.run_dir)
    ranks = stop.part(STOP_SECONDS, "the ranks to end after SIGTERM", reserve=AFTER_RANKS_STOP_SECONDS)
    if mpirun.wait(ranks.remaining()) is None:
        log.warning("the ranks did not end within %.1f s of SIGTERM; stopping mpirun", ranks.seconds)
    end_mpirun(spec, mpirun, stop.part(MPIRUN_STOP_SECONDS, "mpirun to stop").remaining())


def end_mpirun(spec: JobSpec, mpirun: ManagedProcess, grace: float = TERMINATION_GRACE_SECONDS) -> None:
    """Stop mpirun (it stops its ranks), then kill what is left of this host's ranks: mpirun may have
    been killed before it killed them, and a rank launcher does not outlive its parent by itself."""
    mpirun.terminate_tree(grace=grace)
    signal_registered_ranks(spec.run_dir, signal.SIGKILL)


# Custom options that place the ranks on the hosts another way than ours (-map-by slot).
_PLACEMENT_OPTIONS = {("flag", "map-by"), ("flag", "rank-by")}


def _ranks_text(ranks: list[int]) -> str:
    """Ranks as the timeout names them: "rank 5", "ranks 4-7", "ranks [8, 10, 11]"."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    contiguous = ranks == list(range(ranks[0], ranks[-1] + 1))
    return f"ranks {ranks[0]}-{ranks[-1]}" if contiguous else f"ranks {ranks}"


def ranks_not_started(plan: Plan, started: set[int]) -> str:
    """Which ranks have not said they started, per host ("algo-2: ranks 8-15"); without hosts when the
    custom options place the ranks their own way (where those ranks were meant to run is not known
    here). Pure."""
    if option_keys(plan.custom_mpi_options) & _PLACEMENT_OPTIONS:
        missing = [rank for rank in range(plan.total_processes) if rank not in started]
        return _ranks_text(missing) if missing else ""
    per_host = {host: [r for r in plan.ranks_on(host) if r not in started] for host in plan.hosts}
    return "; ".join(f"{host}: {_ranks_text(ranks)}" for host, ranks in per_host.items() if ranks)


def ssh_setup(spec: JobSpec) -> SshSetup | None:
    """How mpirun reaches the other hosts' sshd (None on one host). Pure."""
    if not spec.plan.multi_host:
        return None
    files = SshFiles(spec.run_dir / "ssh")
    return SshSetup(files.client_key, files.known_hosts, spec.plan.ssh_port)


def mpi_launch(spec: JobSpec, coordinator: str) -> tuple[list[str], dict[str, str]]:
    """The mpirun command and its environment. Pure; ``python -m sagetrain plan`` prints the same."""
    env = {**spec.env, "SAGETRAIN_COORDINATOR": coordinator}
    command = mpirun_command(
        spec.plan,
        interface=spec.interface,
        env_names=forwarded_env_names(env),
        rank_argv=[*spec.rank_launcher, *spec.program_argv],
        ssh=ssh_setup(spec),
    )
    return command, env


def run_mpi_master(spec: JobSpec, report: Report) -> Verdict:
    plan = spec.plan
    events = EventQueue()
    files = SshFiles(spec.run_dir / "ssh")
    if plan.multi_host:
        client_public_key = generate_key(files.client_key, "sagetrain-master")
        server = CoordinatorServer(
            events,
            plan.workers,
            lambda hello: {"ssh_client_key": client_public_key},
            port=plan.coordinator_port,
            job_hosts=plan.hosts,
        )
    else:
        server = CoordinatorServer(events, (), lambda hello: {}, bind_address="127.0.0.1", port=0)
    port = server.start()
    mpirun: ManagedProcess | None = None
    stop: Deadline | None = None
    # Every rank's report is kept: when one rank fails, mpirun stops the others and Horovod makes them
    # fail too, and their reports can arrive first.
    failures: list[RankFailure] = []
    try:
        try:
            if plan.multi_host:
                log.info("waiting for %s to join at port %d", ", ".join(plan.workers), port)
                hellos = wait_for_hosts(
                    events,
                    plan.workers,
                    until_ready=True,
                    deadline=spec.worker_wait(
                        f"worker hosts to join master host {plan.master} on port {port}"
                    ),
                )
                host_keys = {host: str(hello.get("ssh_host_key", "")) for host, hello in hellos.items()}
                files.known_hosts.write_text(known_hosts_text(host_keys, plan.ssh_port))
            command, env = mpi_launch(spec, coordinator_address(plan, port))
            log.info("mpirun command: %s", shlex.join(command))
            try:
                mpirun = ManagedProcess.start(command, name="mpirun", env=env, cwd=spec.code_dir)
            except FileNotFoundError:
                raise PlatformError("mpirun is not installed in this image") from None
            mpirun.on_exit(lambda p, code: events.put(ProcessExited(p.name, code)))
            verdict = _watch_mpirun(spec, events, failures)
        except Terminated as stopped:
            stop = stop_deadline()
            if mpirun is not None:
                stop_job(spec, mpirun, stop)
                verdict = stopped_verdict(stopped, events, failures, stop)
            else:
                verdict = Verdict(stopped.exit_code, stopped.cause)
        except SagetrainError as error:
            verdict = Verdict(error.exit_code, error.cause)
        # Final before mpirun is stopped and before the workers learn it (a worker exits on the verdict,
        # and SageMaker then stops us): a stop signal from here on changes nothing.
        verdict = report(verdict)
    finally:
        if mpirun is not None and mpirun.poll() is None:
            end_mpirun(spec, mpirun)
    deliver_verdict(server, verdict, delivery_deadline(stop))
    return verdict


def _watch_mpirun(spec: JobSpec, events: EventQueue, failures: list[RankFailure]) -> Verdict:
    """The verdict, from mpirun's start: mpirun's end, a lost host, or ranks that did not say they
    started within the launch wait (mpirun may still run then: the caller stops it)."""
    plan = spec.plan
    started: set[int] = set()
    launch = spec.launch_wait(f"mpirun to start all {plan.total_processes} ranks")
    while True:
        event = events.get(launch if len(started) < plan.total_processes else None)
        if event is None:
            return Verdict(
                ExitCode.PLATFORM_ERROR,
                launch.timeout_message(f"not started: {ranks_not_started(plan, started)}"),
            )
        if isinstance(event, RankStarted):
            started.add(event.rank)
        elif isinstance(event, RankFailed):
            failures.append(event.failure)
        elif isinstance(event, ProcessExited):
            root = root_failure(failures)
            lost = None
            if event.exit_code != 0 and plan.multi_host and (root is None or root.is_knock_on()):
                lost = lost_host_behind(events, failures)
                root = root_failure(failures)
            if lost is not None:
                return Verdict(
                    ExitCode.PLATFORM_ERROR,
                    f"lost host {lost.host} ({lost.reason}); mpirun ended with code {event.exit_code}",
                )
            return verdict_for_exit(spec, event.exit_code, root, what="mpirun")
        elif isinstance(event, HostLost):
            return Verdict(
                ExitCode.PLATFORM_ERROR, f"lost host {event.host} ({event.reason}); mpirun was stopped"
            )


def run_mpi_worker(spec: JobSpec, report: Report) -> Verdict:
    plan = spec.plan
    events = EventQueue()
    files = SshFiles(spec.run_dir / "ssh")
    client = CoordinatorClient(
        events, plan.master, plan.coordinator_port, plan.current_host, job_hosts=plan.hosts
    )
    sshd: ManagedProcess | None = None
    joined = False
    # After the ranks got SIGTERM for a stop, what is left of them at the end has outlived the stop.
    leftover_ranks_signal = signal.SIGTERM
    try:
        try:
            running_sshd, host_public_key = start_sshd(files, plan.ssh_port)
            sshd = running_sshd.process
            running_sshd.wait_until_listening(
                Deadline(SSHD_START_SECONDS, f"sshd on this host to listen on port {plan.ssh_port}")
            )
            sshd.on_exit(lambda p, code: events.put(ProcessExited(p.name, code)))
            welcome = client.join(
                {"ssh_host_key": host_public_key},
                spec.worker_wait(
                    f"master host {plan.master} to accept this host on port {plan.coordinator_port}"
                ),
            )
            write_authorized_key(files, str(welcome.get("ssh_client_key", "")))
            client.send({"type": "ready"})
            client.listen()
            joined = True
            log.info("joined master host %s; ranks will be started by its mpirun", plan.master)
            verdict = _await_verdict(plan, events)
        except Terminated as stopped:
            verdict = Verdict(stopped.exit_code, stopped.cause)
            if joined:
                signal_registered_ranks(spec.run_dir)
                leftover_ranks_signal = signal.SIGKILL
                verdict = _masters_verdict_after_stop(events, stop_deadline()) or verdict
        except SagetrainError as error:
            verdict = Verdict(error.exit_code, error.cause)
        # Final before sshd and the ranks left here are stopped: that must not change it.
        verdict = report(verdict)
    finally:
        signal_registered_ranks(spec.run_dir, leftover_ranks_signal)
        client.close()
        if sshd is not None:
            sshd.terminate_tree()
    return verdict


def _await_verdict(plan: Plan, events: EventQueue) -> Verdict:
    while True:
        event = events.get()
        verdict = verdict_from_master(event, plan)
        if verdict is not None:
            return verdict
        if isinstance(event, ProcessExited):
            return Verdict(
                ExitCode.PLATFORM_ERROR,
                f"sshd on host {plan.current_host} exited with code {event.exit_code} during the job",
            )


def _masters_verdict_after_stop(events: EventQueue, stop: Deadline) -> Verdict | None:
    """After SIGTERM: the verdict the master sends within ``stop`` (with what rank 0 said about its
    checkpoint); None when the master is gone first or it does not come."""
    while (event := events.get(stop)) is not None:
        if isinstance(event, VerdictReceived):
            return event.verdict
        if isinstance(event, MasterLost):
            return None
    return None
