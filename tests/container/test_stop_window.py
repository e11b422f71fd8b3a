"""Stops that keep the work, on the real image: a job that looks like SageMaker's (an ml.* instance type)
gives its program the window SageMaker gives (SIGKILL 120 s after SIGTERM), so a script that takes 30 s
to save its checkpoint after SIGTERM keeps it and the failure file names it; and a report is written at
the signal, so a container killed before its programs end still leaves one."""

from __future__ import annotations

import pytest
from cluster import DOCKER, start_cluster

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

# A user's script that saves its checkpoint when stopped, slowly (a large model to a slow disk), the way
# SageMaker's spot-training examples do: on SIGTERM, save, then exit.
SLOW_SAVER = """
import os, signal, sys, time

CHECKPOINT = "/opt/ml/checkpoints/ckpt-final.keras"

def save_and_exit(signum, frame):
    print("saving the checkpoint", flush=True)
    time.sleep(30)  # the save's own duration
    with open(CHECKPOINT + ".partial", "w") as file:
        file.write("weights")
    os.replace(CHECKPOINT + ".partial", CHECKPOINT)
    print("saved", CHECKPOINT, flush=True)
    sys.exit(143)

signal.signal(signal.SIGTERM, save_and_exit)
print("training", flush=True)
while True:
    signal.pause()
"""


def slow_saver_code(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(SLOW_SAVER)
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    return code, checkpoints


def test_a_script_that_takes_30_s_to_save_after_sigterm_keeps_its_checkpoint(tmp_path, cpu_image):
    code, checkpoints = slow_saver_code(tmp_path)
    with start_cluster(
        tmp_path, cpu_image, 1, code, name="slow-save", program="train.py", timeout=400,
        extra=["--instance-type", "ml.c5.xlarge", "--stop-timeout", "120", "--checkpoints", str(checkpoints)],
    ) as running:  # fmt: skip
        running.wait_for_line(r"^training$", timeout=300, host="algo-1")
        DOCKER.run(["kill", "--signal", "TERM", running.container("algo-1")])
        stopped = running.wait()
    assert stopped.exit_codes()["algo-1"] == 143, stopped.describe()
    assert (checkpoints / "ckpt-final.keras").read_text() == "weights"
    assert stopped.failure_line("algo-1") == (
        "the job was stopped by SIGTERM (the container was asked to stop); after it, the program wrote "
        "/opt/ml/checkpoints/ckpt-final.keras on host algo-1"
    ), stopped.describe()
    assert not any("killing it" in line for line in stopped.lines), stopped.describe()


def test_a_container_killed_while_its_program_saves_still_leaves_a_report(tmp_path, cpu_image):
    code, checkpoints = slow_saver_code(tmp_path)
    with start_cluster(
        tmp_path, cpu_image, 1, code, name="killed-saving", program="train.py", timeout=400,
        hyperparameters={"sagetrain_stop_seconds": 60},
        extra=["--checkpoints", str(checkpoints)],
    ) as running:  # fmt: skip
        running.wait_for_line(r"^training$", timeout=300, host="algo-1")
        # As SageMaker's local mode stops a container: SIGTERM, then SIGKILL (here 5 s) later.
        DOCKER.run(["stop", "--time", "5", running.container("algo-1")])
        stopped = running.wait()
    assert stopped.exit_codes()["algo-1"] == 137, stopped.describe()
    assert not (checkpoints / "ckpt-final.keras").exists()
    assert stopped.failure_line("algo-1") == (
        "the job was stopped by SIGTERM (the container was asked to stop); the programs had up to 60 s to "
        "save their work and end (sagetrain_stop_seconds is 60), and the container was killed before they did"
    ), stopped.describe()
