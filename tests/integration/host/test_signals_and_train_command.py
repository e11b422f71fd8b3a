"""PID-1 duties and the image's `train` command, with real processes."""

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, make_tree
from sagetrain.deadline import Deadline
from sagetrain.launch.coordinator import EventQueue, Hello, MasterEnded, Outcome
from sagetrain.launch.coordinator.client import CoordinatorClient
from sagetrain.report.verdict import SUCCESS

TRAIN = REPO / "entrypoints" / "train"


def one_host_job(mpi: bool) -> dict[str, object]:
    """train.py as one process, or as 2 MPI ranks on this host."""
    hyperparameters: dict[str, object] = {"sagemaker_program": "train.py"}
    if mpi:
        hyperparameters.update(sagemaker_mpi_enabled=True, sagemaker_mpi_num_of_processes_per_host=2)
    return hyperparameters


def start_running(tree, mpi: bool) -> subprocess.Popen:
    """Start the entry; return once every rank's program printed "program running"."""
    process = tree.start()
    running = 0
    for line in process.stdout:
        running += "program running" in line
        if running == (2 if mpi else 1):
            break
    return process


def stop(process: subprocess.Popen) -> tuple[int, str]:
    """SIGTERM the entry; its exit code and output once it exited."""
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate()
    return process.returncode, output


def alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" not in status.read_text()
    except FileNotFoundError:
        return False


# Records its pid, says it runs, waits; with ignore=True it ignores SIGTERM.
WAITS = """
import os, pathlib, signal, threading
if {ignore}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path({pids!r}, str(os.getpid())).touch()
print("program running", flush=True)
threading.Event().wait(300)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mpi", [False, True])
def test_sigterm_stops_the_job_and_exits_143(job, mpi):
    tree = job(one_host_job(mpi))
    pids = tree.root / "pids"
    pids.mkdir()
    tree.write_code("train.py", WAITS.format(ignore=False, pids=str(pids)))
    code, output = stop(start_running(tree, mpi))
    assert code == 143, output
    assert tree.failure.read_text().startswith("the job was stopped by SIGTERM")
    assert [pid for pid in (int(p.name) for p in pids.iterdir()) if alive(pid)] == []


def test_train_command_runs_our_entry_and_keeps_its_exit_code(job):
    tree = job({"sagemaker_program": "train.py"})
    tree.write_code("train.py", "raise SystemExit(7)\n")
    env = tree.env(PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    result = subprocess.run([str(TRAIN)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 7, result.stderr
    assert tree.failure.read_text().startswith("train.py exited with code 7")


def test_train_command_defers_other_training_modules_to_the_toolkit(job, tmp_path):
    tree = job({"sagemaker_program": "train.py"})
    (tmp_path / "othermodule.py").write_text("def main():\n    print('other module ran')\n")
    toolkit_train = Path(sys.executable).parent / "train"
    env = tree.env(
        SAGEMAKER_TRAINING_MODULE="othermodule:main",
        SAGETRAIN_TOOLKIT_TRAIN=str(toolkit_train),
        PYTHONPATH=str(tmp_path),
    )
    result = subprocess.run([str(TRAIN)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "other module ran" in result.stdout


def test_train_command_help():
    result = subprocess.run([str(TRAIN), "--help"], capture_output=True, text=True, check=True)
    assert result.stdout.startswith("usage: train")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mpi", [False, True])
def test_sigterm_failure_line_carries_what_the_program_said_about_the_stop(job, mpi):
    tree = job(one_host_job(mpi))
    # Like the managed trainer: on SIGTERM, finish up (a moment), say where the state went, exit 143.
    tree.write_code(
        "train.py",
        """
import json, os, signal, sys, threading, time
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
print("program running", flush=True)
stop.wait(300)
time.sleep(1.5)  # stands in for the checkpoint write
rank = os.environ["SAGETRAIN_RANK"]
with open(os.environ["SAGETRAIN_ERROR_FILE"], "w") as error_file:
    json.dump({"message": f"stopped cleanly; state saved to /tmp/state-{rank}"}, error_file)
sys.exit(143)
""",
    )
    code, output = stop(start_running(tree, mpi))
    assert code == 143, output
    first_line = tree.failure.read_text().splitlines()[0]
    assert first_line.startswith("the job was stopped by SIGTERM (the container was asked to stop); rank "), (
        output
    )
    assert "stopped cleanly; state saved to /tmp/state-" in first_line, output


IGNORES_SIGTERM = """
import os, pathlib, signal, subprocess, sys, threading
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, threading; signal.signal(signal.SIGTERM, signal.SIG_IGN); threading.Event().wait(300)"])
for pid in (os.getpid(), child.pid):
    pathlib.Path({pids!r}, str(pid)).touch()
print("program running", flush=True)
threading.Event().wait(300)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mpi", [False, True])
def test_a_program_that_ignores_sigterm_is_killed_with_its_children_before_sagemakers_sigkill(job, mpi):
    tree = job(one_host_job(mpi))
    pids = tree.root / "pids"
    pids.mkdir()
    tree.write_code("train.py", IGNORES_SIGTERM.format(pids=str(pids)))
    process = start_running(tree, mpi)
    signalled_at = time.monotonic()
    try:
        code, output = stop(process)
        stopped_after = time.monotonic() - signalled_at
        assert code == 143, output
        # The bound: SageMaker's local mode SIGKILLs the container 10 s after SIGTERM.
        assert stopped_after < 10.0, output
        survivors = [int(p.name) for p in pids.iterdir() if alive(int(p.name))]
        assert survivors == [], output
    finally:
        for pid in (int(p.name) for p in pids.iterdir()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert len(list(pids.iterdir())) == (4 if mpi else 2)


def still_running_after(pidfds: dict[int, int], seconds: float) -> list[int]:
    """Of the processes (pid: pidfd), those still running after ``seconds``: a pidfd becomes readable
    when its process exits."""
    deadline = time.monotonic() + seconds
    running = []
    for pid, pidfd in pidfds.items():
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            running.append(pid)
    return running


PROGRAM_GONE_SECONDS = 10.0  # the program must not outlive a killed entry by more than this


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mpi", [False, True])
def test_a_program_does_not_outlive_its_killed_entry(job, mpi):
    """The entry SIGKILLed (out of memory, or not PID 1 of a container that takes everything with it):
    a program that ignores SIGTERM still ends."""
    tree = job(one_host_job(mpi))
    pids = tree.root / "pids"
    pids.mkdir()
    tree.write_code("train.py", WAITS.format(ignore=True, pids=str(pids)))
    process = start_running(tree, mpi)
    # Opened before the kill, so a reused pid cannot pass for the program.
    pidfds = {int(p.name): os.pidfd_open(int(p.name)) for p in pids.iterdir()}
    assert len(pidfds) == (2 if mpi else 1)
    try:
        process.kill()
        process.wait()  # not its output: a program left behind would hold the pipe open
        assert still_running_after(pidfds, PROGRAM_GONE_SECONDS) == []
    finally:
        for pidfd in pidfds.values():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
        process.stdout.close()


@pytest.mark.timeout(60)
def test_sigterm_after_the_verdict_was_sent_changes_nothing_on_the_master(tmp_path, free_port):
    """SageMaker local mode: the first container to exit decides, the others get SIGTERM; a worker exits
    as soon as it has the verdict, so the master is stopped right after it sent the verdict."""
    hosts = ["localhost", "algo-2"]  # algo-2 is played by this test: it joins, succeeds, stays connected
    master = make_tree(
        tmp_path,
        "master",
        hosts=hosts,
        current="localhost",
        hyperparameters={
            "sagemaker_program": "train.py",
            "sagetrain_coordinator_port": free_port,
            "sagemaker_multi_worker_mirrored_strategy_enabled": True,
        },
    )
    master.write_code("train.py", "print('master program done')\n")
    process = master.start()
    events = EventQueue()
    worker = CoordinatorClient(
        events, "localhost", free_port, "algo-2", master.host_key("algo-2"), job_hosts=hosts
    )
    try:
        worker.join(Hello(), Deadline(30, "the master to accept algo-2"))
        worker.listen()
        worker.send(Outcome(SUCCESS))
        received = events.get(Deadline(30, "the verdict"))
        assert isinstance(received, MasterEnded), received
        assert received.verdict == SUCCESS
        # The master waits for algo-2 to confirm (it never does here): it is stopped in that wait.
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate()
    finally:
        worker.close()
    assert process.returncode == 0, output
    assert master.success.exists()
    assert not master.failure.exists()
    assert "SIGTERM ignored: the job is over" in output
