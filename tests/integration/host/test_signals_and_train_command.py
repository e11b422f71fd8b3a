"""PID-1 duties and the image's `train` command, with real processes."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, encode

TRAIN = REPO / "entrypoints" / "train"


def one_host_job(mpi: bool) -> dict[str, str]:
    """train.py as one process, or as 2 MPI ranks on this host."""
    hyperparameters = {"sagemaker_program": encode("train.py")}
    if mpi:
        hyperparameters.update(sagemaker_mpi_enabled="true", sagemaker_mpi_num_of_processes_per_host="2")
    return hyperparameters


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mpi", [False, True])
def test_sigterm_stops_the_job_and_exits_143(job, mpi):
    tree = job(one_host_job(mpi))
    pids = tree.root / "pids"
    pids.mkdir()
    tree.write_code(
        "train.py",
        f"""
import os, pathlib, threading
pathlib.Path({str(pids)!r}, str(os.getpid())).touch()
print("program running", flush=True)
threading.Event().wait(300)
""",
    )
    process = tree.start()
    for line in process.stdout:
        if "program running" in line:
            break
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate()
    assert process.returncode == 143, output
    assert tree.failure.read_text().startswith("the job was stopped by SIGTERM")
    for pid in (int(p.name) for p in pids.iterdir()):
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_train_command_runs_our_entry_and_keeps_its_exit_code(job):
    tree = job({"sagemaker_program": encode("train.py")})
    tree.write_code("train.py", "raise SystemExit(7)\n")
    env = tree.env(PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    result = subprocess.run([str(TRAIN)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 7, result.stderr
    assert tree.failure.read_text().startswith("train.py exited with code 7")


def test_train_command_defers_other_training_modules_to_the_toolkit(job, tmp_path):
    tree = job({"sagemaker_program": encode("train.py")})
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
    process = tree.start()
    running = 0
    for line in process.stdout:
        running += "program running" in line
        if running == (2 if mpi else 1):
            break
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate()
    assert process.returncode == 143, output
    first_line = tree.failure.read_text().splitlines()[0]
    assert first_line.startswith("the job was stopped by SIGTERM (the container was asked to stop); rank "), (
        output
    )
    assert "stopped cleanly; state saved to /tmp/state-" in first_line, output
