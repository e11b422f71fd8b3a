"""The trainer's notes follow the job's log level (SM_LOG_LEVEL, as the launcher sets it on every rank):
at INFO every checkpoint is announced; at WARNING only the warning that a mid-epoch checkpoint of another
layout restarts its epoch. Epoch lines and the stop message are printed at any level."""

import re

from trainer_cases import trainer_data as data
from trainer_cases.trainer_harness import CASES, run_trainer

RECORDS, BATCH = 24, 4
STEPS = RECORDS // BATCH


def test_notes_at_info_then_only_the_warning_at_warning(tmp_path):
    data.write_npz(tmp_path / "input" / "data" / "train", RECORDS, 2)
    (tmp_path / "ids").mkdir()
    folder = tmp_path / "checkpoints"
    hyperparameters = {"epochs": 3, "batch_size": BATCH, "seed": 3, "ids_dir": str(tmp_path / "ids")}
    # One process, stopped during the second step of epoch 2.
    stopped = run_trainer(
        tmp_path,
        CASES / "ids_module.py",
        {**hyperparameters, "sigterm_at_step": STEPS + 2, "sigterm_rank": 0},
        extra_env={"SM_LOG_LEVEL": "20"},
    )

    assert stopped.returncode == 143, stopped.stderr[-3000:]
    error = stopped.error(0)
    assert error is not None, stopped.stderr[-3000:]
    stop = re.fullmatch(
        rf"rank 0 \(host algo-1\) wrote the checkpoint {re.escape(str(folder))}/(\S+) "
        rf"\(epoch 2, step (\d+) of {STEPS}\) after SIGTERM",
        error["message"],
    )
    assert stop, error["message"]
    stopped_at = int(stop.group(2))
    assert stop.group(1) == f"sagetrain-epoch000002-step{stopped_at:08d}.npz"
    end_of_epoch_1 = folder / f"sagetrain-epoch000001-step{STEPS:08d}.npz"
    assert stopped.notes() == [
        f"1 rank(s), {RECORDS} training records, {STEPS} steps per epoch, batch {BATCH} per rank "
        f"(global {BATCH})",
        f"wrote the checkpoint {end_of_epoch_1} (epoch 1, step {STEPS} of {STEPS})",
        f"wrote the checkpoint {folder / stop.group(1)} (epoch 2, step {stopped_at} of {STEPS})",
        error["message"],
    ], stopped.stderr[-3000:]
    assert [line.split()[0] for line in stopped.epoch_lines()] == ["epoch=1"]

    # Twice the batch: the mid-epoch position means nothing with other batches, so epoch 2 starts over.
    resumed = run_trainer(
        tmp_path,
        CASES / "ids_module.py",
        {**hyperparameters, "batch_size": 2 * BATCH},
        extra_env={"SM_LOG_LEVEL": "30"},
    )

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.notes() == [
        f"the checkpoint {folder / stop.group(1)} (epoch 2, step {stopped_at} of {STEPS}) was written by a "
        f"job with 1 rank, batch_size {BATCH} and {STEPS} steps per epoch; this job has 1 rank, batch_size "
        f"{2 * BATCH} and {STEPS // 2} steps per epoch, so epoch 2 restarts from its first step."
    ], resumed.stderr[-3000:]
    assert resumed.report(0)["resumed_from"] == {"epochs_completed": 1, "steps_into_epoch": 0}
    assert [line.split()[0] for line in resumed.epoch_lines()] == ["epoch=2", "epoch=3"]
