"""The Horovod/MPI engine: mpirun on the master host, sshd on the others.

Master: coordinator up → every worker joined with its sshd host key → the job's members sent to each
(launch/members.py) and written here → every worker reported ready (our key is in its authorized_keys,
its members file written, its sshd listening) → known_hosts written → mpirun → every rank said it
started (bounded by sagetrain_launch_wait_seconds) → mpirun ends (or a host is lost, or the start timed
out) → verdict reported here → mpirun stopped if still running → verdict broadcast.
Worker: host key → join the master → authorize its key → the job's members written → sshd → ready →
wait for the verdict, or fail when the master is gone. On SIGTERM a worker signals its ranks and still
waits for the master's verdict (within the stop deadline): its ranks' stop is a collective with the
others (rank 0's checkpoint), which needs this host, its sshd and mpirun's daemon up until the ranks have
ended.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from sagetrain import contracts
from sagetrain.config.hyperparameters import LOG_LEVEL_KEY
from sagetrain.deadline import Deadline
from sagetrain.errors import ExitCode, PlatformError, Terminated
from sagetrain.launch.coordinator import (
    EventQueue,
    Hello,
    HostChanged,
    HostState,
    MasterCoordinator,
    MasterEnded,
    ProcessExited,
    RankReport,
    Ready,
    Welcome,
    WorkerCoordinator,
    coordinator_address,
    failure_of,
)
from sagetrain.launch.lifecycle import EngineRun, stopped_verdict
from sagetrain.launch.members import write_job_members
from sagetrain.launch.process import TERMINATION_GRACE_SECONDS, ManagedProcess
from sagetrain.launch.programs import signal_registered_ranks, verdict_for_exit
from sagetrain.launch.spec import JobSpec, env_added
from sagetrain.launch.sshd import (
    SshFiles,
    generate_host_key,
    generate_key,
    known_hosts_text,
    session_env,
    start_sshd,
    write_authorized_key,
)
from sagetrain.plan.model import Plan, Role
from sagetrain.plan.mpi_command import SshSetup, forwarded_env_names, launch_summary, mpirun_command
from sagetrain.redact import CommandLine
from sagetrain.report.verdict import RankFailure, Verdict, root_failure

log = logging.getLogger(__name__)

SSHD_START_SECONDS = 60.0
# Parts of the stop path's one deadline (the plan's stop window). The ranks wind down first
# (the managed trainer finishes its step and checkpoints) while this much of it is kept for what
# follows: stopping mpirun, the ranks' reports, the verdict's delivery. mpirun is stopped only after the
# ranks had their time: on SIGTERM it SIGKILLs its ranks a second later, which would cut a checkpoint short.
AFTER_RANKS_STOP_SECONDS = 2.5
MPIRUN_STOP_SECONDS = 1.5
# After mpirun failed with no rank to blame, how long a host's lost connection may take to be noticed.
LOST_HOST_NOTICE_SECONDS = 2.0


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
    if not plan.places_ranks:
        missing = [rank for rank in range(plan.total_processes) if rank not in started]
        return _ranks_text(missing) if missing else ""
    per_host = {host: [r for r in plan.ranks_on(host) if r not in started] for host in plan.hosts}
    return "; ".join(f"{host}: {_ranks_text(ranks)}" for host, ranks in per_host.items() if ranks)


def ssh_setup(spec: JobSpec) -> SshSetup | None:
    """How mpirun reaches the other hosts' sshd (None on one host). Pure."""
    if not spec.plan.multi_host:
        return None
    files = SshFiles.in_folder(spec.run_dir.ssh)
    return SshSetup(files.client_key, files.known_hosts, spec.plan.launch.ssh_port)


def mpi_launch(spec: JobSpec, coordinator: str) -> tuple[list[str], dict[str, str]]:
    """The mpirun command and its environment. Pure; ``python -m sagetrain plan`` prints the same."""
    env = {**spec.env, contracts.COORDINATOR_VAR: coordinator}
    command = mpirun_command(
        spec.plan,
        interface=spec.interface,
        env_names=forwarded_env_names(env),
        rank_argv=spec.rank_argv,
        ssh=ssh_setup(spec),
    )
    return command, env


def log_mpirun_command(spec: JobSpec, command: Sequence[str]) -> None:
    """The launch in a few words, and the command, once, as it runs, at debug level. The command is
    logged as a structure, not a joined text: the log filter masks each argument before it is quoted (a
    secret holding a ' would otherwise be printed re-quoted)."""
    log.info(
        "starting %s; the whole command at log level DEBUG (%s=%d)",
        launch_summary(spec.plan, spec.interface), LOG_LEVEL_KEY, logging.DEBUG,
    )  # fmt: skip
    log.debug("mpirun command: %s", CommandLine(tuple(command)))


def lost_host_behind(events: EventQueue, failures: list[RankFailure]) -> HostChanged | None:
    """After mpirun failed: the lost host that explains it, if one is reported within
    LOST_HOST_NOTICE_SECONDS. Only asked when no rank failed on its own: a host that dies takes mpirun
    down at once, and the ranks it leaves report knock-on failures, often before its connection to the
    coordinator is seen to close. Rank reports that arrive meanwhile are added to ``failures``."""
    deadline = Deadline(LOST_HOST_NOTICE_SECONDS, "a lost host to be noticed")
    while (event := events.get(deadline)) is not None:
        if isinstance(event, HostChanged) and event.state is HostState.LOST:
            return event
        failure = failure_of(event)
        if failure is not None:
            failures.append(failure)
            if not failure.is_knock_on():
                return None
    return None


class MpiMaster:
    def __init__(self, spec: JobSpec) -> None:
        self._spec = spec
        self._events = EventQueue()
        self._files = SshFiles.in_folder(spec.run_dir.ssh)
        welcome = Welcome()
        if spec.plan.multi_host:
            welcome = Welcome(ssh_client_key=generate_key(self._files.client_key, "sagetrain-master"))
        self._coordinator = MasterCoordinator(spec.job_hosts, self._events, lambda hello: welcome)
        self._address = ""
        self._mpirun: ManagedProcess | None = None
        # Every rank's report is kept: when one rank fails, mpirun stops the others and Horovod makes them
        # fail too, and their reports can arrive first.
        self._failures: list[RankFailure] = []

    def prepare(self) -> None:
        spec = self._spec
        self._address = self._coordinator.open()
        hellos = self._coordinator.wait_for_workers(spec.worker_wait, until_ready=False)
        # Before mpirun opens a port here; a worker reports ready once it has written its own.
        write_job_members(spec.members_filter, spec.run_dir, self._coordinator.share_members())
        self._coordinator.wait_until_ready(spec.worker_wait)
        if hellos:
            host_keys = {host: hello.ssh_host_key for host, hello in hellos.items()}
            self._files.known_hosts.write_text(known_hosts_text(host_keys, self._spec.plan.launch.ssh_port))

    def start(self) -> None:
        command, env = mpi_launch(self._spec, self._address)
        log_mpirun_command(self._spec, command)
        try:
            self._mpirun = ManagedProcess.start(command, name="mpirun", env=env, cwd=self._spec.code_dir)
        except FileNotFoundError:
            raise PlatformError("mpirun is not installed in this image") from None
        self._mpirun.on_exit(lambda p, code: self._events.put(ProcessExited(p.name, code)))

    def wait(self) -> Verdict:
        """The verdict, from mpirun's start: mpirun's end, a lost host, or ranks that did not say they
        started within the launch wait (mpirun may still run then: clean_up stops it)."""
        plan = self._spec.plan
        started: set[int] = set()
        launch = self._spec.launch_wait(f"mpirun to start all {plan.total_processes} ranks")
        while True:
            event = self._events.get(launch if len(started) < plan.total_processes else None)
            if event is None:
                return Verdict(
                    ExitCode.PLATFORM_ERROR,
                    launch.timeout_message(f"not started: {ranks_not_started(plan, started)}"),
                )
            if isinstance(event, RankReport) and event.failure is None:
                started.add(event.rank)
            elif isinstance(event, RankReport) and event.failure is not None:
                self._failures.append(event.failure)
            elif isinstance(event, ProcessExited):
                return self._mpirun_verdict(event.exit_code)
            elif isinstance(event, HostChanged) and event.state is HostState.LOST:
                return Verdict(
                    ExitCode.PLATFORM_ERROR, f"lost host {event.host} ({event.reason}); mpirun was stopped"
                )

    def _mpirun_verdict(self, exit_code: int) -> Verdict:
        root = root_failure(self._failures)
        if exit_code != 0 and self._spec.plan.multi_host and (root is None or root.is_knock_on()):
            lost = lost_host_behind(self._events, self._failures)
            if lost is not None:
                return Verdict(
                    ExitCode.PLATFORM_ERROR,
                    f"lost host {lost.host} ({lost.reason}); mpirun ended with code {exit_code}",
                )
            root = root_failure(self._failures)
        return verdict_for_exit(self._spec, exit_code, root, what="mpirun")

    def stop(self, stopped: Terminated, stop: Deadline) -> Verdict:
        """Signal this host's ranks (their launchers' process groups); a rank that ends makes mpirun end
        the job on every host, and the launchers report how their program ended. mpirun is signalled
        only if the job outlives the ranks' part of ``stop``; what is left of this host's ranks then
        (mpirun may be killed before it killed them) is killed."""
        mpirun = self._mpirun
        if mpirun is None:
            return Verdict(stopped.exit_code, stopped.cause)
        signal_registered_ranks(self._spec.run_dir)
        ranks = stop.part(stop.seconds, "the ranks to end after SIGTERM", reserve=AFTER_RANKS_STOP_SECONDS)
        if mpirun.wait(ranks.remaining()) is None:
            log.warning("the ranks did not end within %.1f s of SIGTERM; stopping mpirun", ranks.seconds)
        self._end_mpirun(mpirun, stop.part(MPIRUN_STOP_SECONDS, "mpirun to stop").remaining())
        return stopped_verdict(stopped, self._events, self._failures, stop, self._spec.checkpoints)

    def _end_mpirun(self, mpirun: ManagedProcess, grace: float = TERMINATION_GRACE_SECONDS) -> None:
        """Stop mpirun (it stops its ranks), then kill what is left of this host's ranks: mpirun may have
        been killed before it killed them, and a rank launcher does not outlive its parent by itself."""
        mpirun.terminate_tree(grace=grace)
        signal_registered_ranks(self._spec.run_dir, signal.SIGKILL)

    def clean_up(self) -> None:
        if self._mpirun is not None and self._mpirun.poll() is None:
            self._end_mpirun(self._mpirun)

    def deliver(self, verdict: Verdict, stop: Deadline | None) -> None:
        self._coordinator.deliver(verdict, stop)


class MpiWorker:
    def __init__(self, spec: JobSpec) -> None:
        self._spec = spec
        self._events = EventQueue()
        self._files = SshFiles.in_folder(spec.run_dir.ssh)
        self._coordinator = WorkerCoordinator(spec.job_hosts, self._events)
        self._sshd: ManagedProcess | None = None
        self._joined = False
        # After the ranks got SIGTERM for a stop, what is left of them at the end has outlived the stop.
        self._leftover_ranks_signal = signal.SIGTERM

    def prepare(self) -> None:
        spec = self._spec
        port = spec.plan.launch.ssh_port
        host_public_key = generate_host_key(self._files)
        welcome = self._coordinator.join(Hello(ssh_host_key=host_public_key), spec.worker_wait)
        write_authorized_key(self._files, welcome.ssh_client_key)
        # Before sshd opens its port: its sessions (orted, the ranks) take connections from the members.
        write_job_members(
            spec.members_filter, spec.run_dir, self._coordinator.receive_members(spec.worker_wait)
        )
        session = session_env(spec.members_filter, spec.run_dir)
        running_sshd = start_sshd(self._files, port, spec.env, session)
        self._sshd = running_sshd.process
        running_sshd.wait_until_listening(
            Deadline(SSHD_START_SECONDS, f"sshd on this host to listen on port {port}")
        )
        self._sshd.on_exit(lambda p, code: self._events.put(ProcessExited(p.name, code)))
        self._coordinator.send(Ready())
        self._coordinator.listen()
        self._joined = True
        log.info("joined master host %s; ranks will be started by its mpirun", self._spec.plan.master)

    def start(self) -> None:
        """Nothing: the master's mpirun starts this host's ranks through sshd."""

    def wait(self) -> Verdict:
        host = self._spec.plan.current_host

        def sshd_exited(exited: ProcessExited) -> Verdict:
            cause = f"sshd on host {host} exited with code {exited.exit_code} during the job"
            return Verdict(ExitCode.PLATFORM_ERROR, cause)

        return self._coordinator.wait_for_verdict(sshd_exited)

    def stop(self, stopped: Terminated, stop: Deadline) -> Verdict:
        """Signal this host's ranks and take the master's verdict (with what rank 0 said about its
        checkpoint) if it comes within ``stop``; else this host's own "stopped"."""
        if not self._joined:
            return Verdict(stopped.exit_code, stopped.cause)
        signal_registered_ranks(self._spec.run_dir)
        self._leftover_ranks_signal = signal.SIGKILL
        while (event := self._events.get(stop)) is not None:
            if isinstance(event, MasterEnded):
                return event.verdict or Verdict(stopped.exit_code, stopped.cause)
        return Verdict(stopped.exit_code, stopped.cause)

    def clean_up(self) -> None:
        signal_registered_ranks(self._spec.run_dir, self._leftover_ranks_signal)
        self._coordinator.close()
        if self._sshd is not None:
            self._sshd.terminate_tree()

    def deliver(self, verdict: Verdict, stop: Deadline | None) -> None:
        """Nothing: the master delivers."""


def make_run(spec: JobSpec) -> EngineRun:
    return MpiMaster(spec) if spec.plan.role is Role.MASTER else MpiWorker(spec)


def describe(spec: JobSpec, environ: Mapping[str, str]) -> dict[str, Any]:
    """What the dry run shows: the mpirun command the master runs and its environment."""
    plan = spec.plan
    port = plan.launch.coordinator_port if plan.multi_host else 0
    command, env = mpi_launch(spec, coordinator_address(plan, port))
    return {"host": plan.master, "command": command, "env": env_added(env, environ)}
