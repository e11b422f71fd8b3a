"""TF_CONFIG engines with two host processes on loopback ("localhost" and "127.0.0.1" are two names for
this machine): consistent configs, and the coordinator's verdict protocol across hosts."""

import contextlib
import json
import os
import signal

import pytest
from conftest import make_tree

HOSTS = ["localhost", "127.0.0.1"]


def two_hosts(tmp_path, port, **extra):
    hyperparameters = {
        "sagemaker_program": "train.py",
        "sagetrain_coordinator_port": port,
        "sagemaker_multi_worker_mirrored_strategy_enabled": True,
        **extra,
    }
    return [
        make_tree(tmp_path, f"h{i}", hosts=HOSTS, current=host, hyperparameters=hyperparameters)
        for i, host in enumerate(HOSTS)
    ]


WRITE_TF_CONFIG = """
import os
with open(os.path.join(os.environ["SM_MODEL_DIR"], "tf_config.json"), "w") as f:
    f.write(os.environ["TF_CONFIG"])
"""


@pytest.mark.timeout(120)
def test_two_hosts_get_one_cluster_and_their_own_index(tmp_path, free_port):
    master, worker = two_hosts(tmp_path, free_port)
    for tree in (master, worker):
        tree.write_code("train.py", WRITE_TF_CONFIG)
    worker_process = worker.start()  # hosts start in any order: the worker waits for the master
    master_code, master_output = master.run()
    worker_output, _ = worker_process.communicate()
    assert (master_code, worker_process.returncode) == (0, 0), master_output + worker_output
    configs = [json.loads((t.model_dir / "tf_config.json").read_text()) for t in (master, worker)]
    assert configs[0]["cluster"] == configs[1]["cluster"] == {"worker": ["localhost:2222", "127.0.0.1:2222"]}
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert master.success.exists() and worker.success.exists()


@pytest.mark.timeout(120)
def test_a_failing_worker_host_fails_both_hosts_with_its_code(tmp_path, free_port):
    master, worker = two_hosts(tmp_path, free_port)
    # The master's program would wait for its peer forever (as a collective does); the verdict stops it.
    master.write_code("train.py", "import threading\nthreading.Event().wait(300)\n")
    worker.write_code("train.py", "import sys\nprint('worker says no')\nsys.exit(5)\n")
    master_process = master.start()
    worker_code, worker_output = worker.run()
    master_output, _ = master_process.communicate()
    assert (master_process.returncode, worker_code) == (5, 5), master_output + worker_output
    expected = "train.py exited with code 5 on rank 1 (host 127.0.0.1); its last line: 'worker says no'"
    assert master.failure.read_text().splitlines()[0] == expected
    assert worker.failure.read_text().splitlines()[0] == expected
    assert "worker says no" in master.failure.read_text()


@pytest.mark.timeout(120)
def test_worker_fails_within_seconds_when_the_master_dies(tmp_path, free_port):
    master, worker = two_hosts(tmp_path, free_port)
    master.write_code(
        "train.py",
        "import os, threading\nprint('master program pid', os.getpid(), flush=True)\n"
        "threading.Event().wait(300)\n",
    )
    worker.write_code("train.py", "import threading\nthreading.Event().wait(300)\n")
    master_process = master.start()
    worker_process = worker.start()
    program_pid = None
    for line in master_process.stdout:  # every host joined and the master's program runs: the job is on
        if "master program pid" in line:  # after the rank's tag
            program_pid = int(line.split()[-1])
            break
    master_process.send_signal(signal.SIGKILL)  # the master host vanishes without a word
    master_process.wait()
    try:
        worker_output, _ = worker_process.communicate()
        assert worker_process.returncode == 2, worker_output
        assert worker.failure.read_text().startswith("lost contact with master host localhost")
    finally:
        if program_pid:  # normally gone with its host (parent-death signal); never leave it behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(program_pid, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_master_fails_the_job_when_a_worker_host_vanishes(tmp_path, free_port):
    master, worker = two_hosts(tmp_path, free_port)
    master.write_code("train.py", "import threading\nthreading.Event().wait(300)\n")
    worker.write_code(
        "train.py",
        "import os, threading\n"
        "print('worker program pid', os.getpid(), flush=True)\n"
        "threading.Event().wait(300)\n",
    )
    master_process = master.start()
    worker_process = worker.start()
    program_pid = None
    for line in worker_process.stdout:
        if "worker program pid" in line:  # after the rank's tag
            program_pid = int(line.split()[-1])
            break
    worker_process.send_signal(signal.SIGKILL)
    worker_process.wait()
    try:
        master_output, _ = master_process.communicate()
        assert master_process.returncode == 2, master_output
        assert master.failure.read_text().startswith("lost host 127.0.0.1")
    finally:
        if program_pid:  # normally gone with its host (parent-death signal); never leave it behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(program_pid, signal.SIGKILL)
