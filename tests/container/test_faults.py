"""Faults on a running 2-host job: a host killed, a rank raising, SIGTERM with checkpoint and resume,
a worker starting late, a worker never starting.

"Within N s" is enforced the SageMaker-local-mode way, not by timing assertions: the runner's --grace N
gives the other hosts N seconds after the first exit to end on their own and stops any host still
running after that, which the test then sees as `stopped_by_runner`. Measured times are printed.
"""

import re
import time

import pytest
from cluster import (
    CASES,
    docker,
    exited_on_their_own,
    run_cluster,
    seconds_after,
    start_cluster,
    write_regression_csv,
)

pytestmark = [pytest.mark.container, pytest.mark.timeout(600)]

HOROVOD = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 1}
FAULTS = CASES / "faults"
# The trainer's epoch line, as printed by rank 0 (mpirun tags rank output with [job,rank]<stdout>:).
EPOCH_LINE = re.compile(r"(?:\| |<stdout>:)epoch=(\d+)\b")


def start_long_job(tmp_path, image, name, grace):
    hps = {**HOROVOD, "steps": 3000, "pause": 0.2}
    running = start_cluster(
        tmp_path, image, 2, FAULTS, name=name, program="train.py", hyperparameters=hps,
        extra=["--grace", str(grace)], timeout=420,
    )  # fmt: skip
    running.wait_for_line(r"(^|:)step=5$", timeout=300, host="algo-1")
    return running


@pytest.mark.parametrize("victim", ["algo-2", "algo-1"])
def test_a_killed_host_ends_the_job_on_every_other_host_within_60_s(tmp_path, cpu_image, victim):
    running = start_long_job(tmp_path, cpu_image, f"kill-{victim}", grace=60)
    killed_at = time.time()
    docker("kill", running.container(victim))
    result = running.wait()
    print("exit seconds after the kill:", seconds_after(result, killed_at))
    survivor = "algo-1" if victim == "algo-2" else "algo-2"
    assert result.exit_code != 0, result.describe()
    assert result.exit_codes()[victim] == 137
    assert exited_on_their_own(result)[survivor], (
        f"{survivor} was still running 60 s later\n{result.describe()}"
    )
    assert result.exit_codes()[survivor] not in (0, None), result.describe()
    line = result.failure_line(survivor)
    assert line is not None, f"{survivor} wrote no failure file\n{result.describe()}"
    if victim == "algo-2":
        # The master's sentence names the host it lost.
        assert "algo-2" in line, result.describe()


def test_a_rank_raising_on_one_host_ends_the_job_within_30_s_naming_host_and_rank(tmp_path, cpu_image):
    hps = {**HOROVOD, "steps": 3000, "pause": 0.2, "raise_host": "algo-2", "raise_rank": 1}
    result = run_cluster(
        tmp_path, cpu_image, 2, FAULTS, name="raise", program="train.py", hyperparameters=hps,
        extra=["--grace", "30"], timeout=420,
    )  # fmt: skip
    # mpirun gathers every rank's output on the master, tagged [job,rank]<stdout>.
    raised = [m for line in result.lines if (m := re.search(r"raising at ([0-9.]+)", line))]
    assert raised, result.describe()
    after_raise = seconds_after(result, float(raised[0].group(1)))
    print("exit seconds after the raise:", after_raise)
    assert all(seconds is not None and seconds <= 30 for seconds in after_raise.values()), result.describe()
    assert result.exit_code != 0, result.describe()
    assert all(exited_on_their_own(result).values()), result.describe()
    assert all(code not in (0, None) for code in result.exit_codes().values()), result.describe()
    line = result.failure_line("algo-1") or ""
    assert "algo-2" in line and re.search(r"\brank 1\b", line), result.describe()


def test_sigterm_writes_a_checkpoint_and_a_restart_resumes(tmp_path, cpu_image):
    data = write_regression_csv(tmp_path / "data", rows=4000)
    checkpoints = tmp_path / "checkpoints"
    # No checkpoint per epoch: the only one the first run can leave is the one SIGTERM makes it write.
    hps = {**HOROVOD, "epochs": 6, "batch_size": 16, "label_column": "label", "seed": 5,
           "checkpoint_every_epochs": 0}  # fmt: skip
    job = dict(
        program="model.py", hyperparameters=hps, channels={"train": data},
        env={"SAGETRAIN_TRAINER_REPORT_DIR": "/opt/ml/output/data/trainer-report"},
        extra=["--grace", "60", "--checkpoints", str(checkpoints)], timeout=540,
    )  # fmt: skip
    running = start_cluster(tmp_path, cpu_image, 2, CASES / "keras_module", name="sigterm", **job)
    running.wait_for_line(r"(^|:)epoch=2\b", timeout=400)
    docker("stop", "--time", "10", running.container("algo-1"))
    stopped = running.wait()
    assert stopped.exit_code != 0, stopped.describe()
    assert stopped.exit_codes()["algo-1"] == 143, stopped.describe()
    saved = sorted(path.name for path in checkpoints.iterdir())
    assert len(saved) == 1, f"expected the SIGTERM checkpoint alone in {checkpoints}: {saved}"
    line = stopped.failure_line("algo-1") or ""
    # The entry's sentence, then the trainer's own account of where it stopped and what it wrote.
    assert "stopped by SIGTERM" in line and "checkpoint written to /opt/ml/checkpoints/" in line, line
    assert saved[0] in line, (saved, line)
    last_epoch = max(int(m.group(1)) for text in stopped.lines if (m := EPOCH_LINE.search(text)))

    resumed = run_cluster(tmp_path, cpu_image, 2, CASES / "keras_module", name="resume", **job)
    assert resumed.exit_code == 0, resumed.describe()
    epochs = [int(m.group(1)) for text in resumed.lines if (m := EPOCH_LINE.search(text))]
    print(f"first run reached epoch {last_epoch}, checkpoints {saved}; resumed run logged epochs {epochs}")
    assert epochs and epochs[0] > 1 and epochs[0] >= last_epoch, epochs
    assert epochs[-1] == 6


def test_a_worker_starting_60_s_late_still_joins(tmp_path, cpu_image):
    result = run_cluster(
        tmp_path, cpu_image, 2, FAULTS, name="late", program="train.py",
        hyperparameters={**HOROVOD, "steps": 3}, extra=["--start-delay", "algo-2=60", "--grace", "60"],
        timeout=420,
    )  # fmt: skip
    assert result.exit_code == 0, result.describe()
    assert result.exit_codes() == {"algo-1": 0, "algo-2": 0}, result.describe()
    assert any(line.endswith("rank 1 of 2 started on algo-2") for line in result.lines), result.describe()
    assert (result.output / "model" / "steps.txt").read_text().strip() == "3"


def test_a_worker_that_never_starts_fails_the_master_when_its_wait_ends(tmp_path, cpu_image):
    hps = {**HOROVOD, "steps": 3, "sagetrain_worker_wait_seconds": 20}
    result = run_cluster(
        tmp_path, cpu_image, 2, FAULTS, name="never", program="train.py", hyperparameters=hps,
        extra=["--start-delay", "algo-2=3600"], timeout=300,
    )  # fmt: skip
    assert result.exit_code not in (0, None), result.describe()
    assert result.host("algo-2")["state"] == "never_started"
    line = result.failure_line("algo-1") or ""
    print("master's failure line:", line)
    assert "algo-2" in line, result.describe()
    assert "sagetrain_worker_wait_seconds" in line or "20" in line, result.describe()
