"""The Horovod/MPI engine: mpirun on the master host, sshd on the others.

Master: coordinator up → every worker joined with its sshd host key and reported ready (our key is in
its authorized_keys) → known_hosts written → mpirun → verdict broadcast. Worker: host key → sshd →
join the master → authorize its key → ready → wait for the verdict, or fail when the master is gone.
"""

from __future__ import annotations

import logging
import shlex

from sagetrain.deadline import Deadline
from sagetrain.errors import ExitCode, PlatformError, SagetrainError, Terminated
from sagetrain.launch.coordinator import CoordinatorClient, CoordinatorServer
from sagetrain.launch.events import (
    EventQueue,
    HostLost,
    MasterLost,
    ProcessExited,
    RankFailed,
    VerdictReceived,
)
from sagetrain.launch.job import (
    VERDICT_DELIVERY_SECONDS,
    JobSpec,
    coordinator_address,
    lost_host_behind,
    stop_registered_ranks,
    stopped_verdict,
    verdict_for_exit,
    wait_for_hosts,
)
from sagetrain.launch.process import ManagedProcess
from sagetrain.launch.sshd import (
    SshFiles,
    generate_key,
    known_hosts_text,
    start_sshd,
    write_authorized_key,
)
from sagetrain.plan.mpi_command import SshSetup, forwarded_env_names, mpirun_command
from sagetrain.report.verdict import RankFailure, Verdict, root_failure

log = logging.getLogger(__name__)

SSHD_START_SECONDS = 60.0
# How long a stopped job's ranks get to wind down (the managed trainer: finish the step, checkpoint)
# before mpirun is stopped too. SageMaker local mode SIGKILLs a container 10 s after SIGTERM.
RANKS_STOP_SECONDS = 6.0
MPIRUN_STOP_SECONDS = 2.0


def stop_job(spec: JobSpec, mpirun: ManagedProcess) -> None:
    """On SIGTERM: signal this host's ranks through their launchers, which forward it and report how
    their program ended; a rank that ends makes mpirun end the job on every host. mpirun is signalled
    only if the job outlives RANKS_STOP_SECONDS: on SIGTERM it SIGKILLs its ranks a second later, which
    would cut short a checkpoint and lose the ranks' reports."""
    stop_registered_ranks(spec.run_dir)
    if mpirun.wait(RANKS_STOP_SECONDS) is None:
        log.warning("the ranks did not end within %g s of SIGTERM; stopping mpirun", RANKS_STOP_SECONDS)
    mpirun.terminate_tree(grace=MPIRUN_STOP_SECONDS)


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


def run_mpi_master(spec: JobSpec) -> Verdict:
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
    # Every rank's report is kept: when one rank fails, mpirun stops the others and Horovod makes them
    # fail too, and their reports can arrive first.
    failures: list[RankFailure] = []
    try:
        if plan.multi_host:
            log.info("waiting for %s to join at port %d", ", ".join(plan.workers), port)
            hellos = wait_for_hosts(
                events,
                plan.workers,
                until_ready=True,
                deadline=spec.worker_wait(f"worker hosts to join master host {plan.master} on port {port}"),
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
        while True:
            event = events.get()
            if isinstance(event, RankFailed):
                failures.append(event.failure)
            elif isinstance(event, ProcessExited):
                root = root_failure(failures)
                lost = None
                if event.exit_code != 0 and plan.multi_host and (root is None or root.is_knock_on()):
                    lost = lost_host_behind(events, failures)
                    root = root_failure(failures)
                if lost is not None:
                    verdict = Verdict(
                        ExitCode.PLATFORM_ERROR,
                        f"lost host {lost.host} ({lost.reason}); mpirun ended with code {event.exit_code}",
                    )
                else:
                    verdict = verdict_for_exit(spec, event.exit_code, root, what="mpirun")
                break
            elif isinstance(event, HostLost):
                mpirun.terminate_tree()
                verdict = Verdict(
                    ExitCode.PLATFORM_ERROR, f"lost host {event.host} ({event.reason}); mpirun was stopped"
                )
                break
    except Terminated as stopped:
        if mpirun is not None:
            stop_job(spec, mpirun)
            verdict = stopped_verdict(stopped, events, failures)
        else:
            verdict = Verdict(stopped.exit_code, stopped.cause)
    except SagetrainError as error:
        verdict = Verdict(error.exit_code, error.cause)
    finally:
        if mpirun is not None and mpirun.poll() is None:
            mpirun.terminate_tree()
    server.broadcast(verdict)
    still = server.wait_until_disconnected(
        Deadline(VERDICT_DELIVERY_SECONDS, "workers to receive the verdict")
    )
    if still:
        log.warning("hosts %s did not confirm the verdict", ", ".join(still))
    server.close()
    return verdict


def run_mpi_worker(spec: JobSpec) -> Verdict:
    plan = spec.plan
    events = EventQueue()
    files = SshFiles(spec.run_dir / "ssh")
    client = CoordinatorClient(
        events, plan.master, plan.coordinator_port, plan.current_host, job_hosts=plan.hosts
    )
    sshd: ManagedProcess | None = None
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
        log.info("joined master host %s; ranks will be started by its mpirun", plan.master)
        while True:
            event = events.get()
            if isinstance(event, VerdictReceived):
                return event.verdict
            if isinstance(event, MasterLost):
                return Verdict(
                    ExitCode.PLATFORM_ERROR, f"lost contact with master host {plan.master} ({event.reason})"
                )
            if isinstance(event, ProcessExited):
                return Verdict(
                    ExitCode.PLATFORM_ERROR,
                    f"sshd on host {plan.current_host} exited with code {event.exit_code} during the job",
                )
    except SagetrainError as error:
        return Verdict(error.exit_code, error.cause)
    finally:
        stop_registered_ranks(spec.run_dir)
        client.close()
        if sshd is not None:
            sshd.terminate_tree()
