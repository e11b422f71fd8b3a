"""SIGTERM mid-training on one rank: every rank stops at the same step, rank 0 checkpoints, exit 143; a
restart on the same /opt/ml tree continues there and ends with the weights of an uninterrupted run. And a
rank killed outright in epoch 3: the restart continues from the end of epoch 2, with the same result."""

from pathlib import Path

import numpy as np
import pytest
from trainer_cases import trainer_data as data
from trainer_cases.trainer_harness import CASES, run_trainer, step_ids

RANKS, RECORDS, EPOCHS, BATCH = 2, 37, 4, 8
STEPS = 5  # ceil(min(19, 18) / (8 // 2))


def fresh_tree(root: Path) -> Path:
    data.write_npz(root / "input" / "data" / "train", RECORDS, 3)
    data.write_npz(root / "input" / "data" / "validation", 9, 1)
    (root / "ids").mkdir(parents=True)
    return root


def hyperparameters(root: Path, **extra) -> dict:
    return {"epochs": EPOCHS, "batch_size": BATCH, "seed": 11, "ids_dir": str(root / "ids"), **extra}


@pytest.mark.parametrize("engine", ["horovod", "multi_worker_mirrored"])
def test_sigterm_checkpoints_and_restart_equals_uninterrupted_run(tmp_path, engine):
    interrupted = fresh_tree(tmp_path / "interrupted")
    # Rank 1 alone is signalled, during the first step of epoch 3.
    first = run_trainer(
        interrupted,
        CASES / "ids_module.py",
        hyperparameters(interrupted, sigterm_at_step=2 * STEPS + 1, sigterm_rank=1),
        ranks=RANKS,
        engine=engine,
    )

    assert first.returncode != 0
    errors = [first.error(rank) for rank in range(RANKS)]
    assert all(error is not None for error in errors), first.stderr[-3000:]
    message = errors[0]["message"]
    assert message.startswith("stopped by SIGTERM after epoch 3 step "), message
    assert f"checkpoint written to {interrupted / 'checkpoints'}" in message
    assert all(error["message"] == message for error in errors), "ranks agree on where they stopped"
    stopped_at = int(message.split(" step ")[1].split(";")[0])
    assert [len(step_ids(interrupted, rank)) for rank in range(RANKS)] == [2 * STEPS + stopped_at] * RANKS
    assert len(first.epoch_lines()) == 2
    checkpoints = sorted(path.name for path in (interrupted / "checkpoints").iterdir())
    assert checkpoints[-1] == f"sagetrain-epoch000002-step{stopped_at:08d}.npz"

    second = run_trainer(
        interrupted, CASES / "ids_module.py", hyperparameters(interrupted), ranks=RANKS, engine=engine
    )

    assert second.returncode == 0, second.stderr[-3000:]
    report = second.report(0)
    assert report["resumed_from"] == {"epochs_completed": 2, "steps_into_epoch": stopped_at}
    assert [epoch["epoch"] for epoch in report["epochs"]] == [3, 4]
    assert [line.split()[0] for line in second.epoch_lines()] == ["epoch=3", "epoch=4"]
    # Across both runs every record was trained on exactly once per epoch.
    total_steps = [len(step_ids(interrupted, rank)) for rank in range(RANKS)]
    assert total_steps == [EPOCHS * STEPS] * RANKS

    straight = fresh_tree(tmp_path / "straight")
    uninterrupted = run_trainer(
        straight, CASES / "ids_module.py", hyperparameters(straight), ranks=RANKS, engine=engine
    )

    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    for resumed, reference in zip(second.weights(0), uninterrupted.weights(0), strict=True):
        np.testing.assert_allclose(resumed, reference, rtol=1e-5, atol=1e-6)
    for rank in range(RANKS):
        assert step_ids(interrupted, rank) == step_ids(straight, rank), "same records in the same order"


def test_a_job_killed_in_epoch_3_resumes_at_epoch_3_and_equals_an_uninterrupted_run(tmp_path):
    killed = fresh_tree(tmp_path / "killed")
    # The second step of epoch 3 on rank 1: its first step's allreduce proves rank 0 finished epoch 2,
    # checkpoint included.
    first = run_trainer(
        killed,
        CASES / "ids_module.py",
        hyperparameters(killed, kill_at_step=2 * STEPS + 2, sigterm_rank=1),
        ranks=RANKS,
    )
    assert first.returncode != 0
    assert len(first.epoch_lines()) == 2, first.stdout[-3000:]
    checkpoints = sorted(path.name for path in (killed / "checkpoints").iterdir())
    assert checkpoints[-1] == "sagetrain-epoch000002-step00000000.npz", checkpoints

    second = run_trainer(killed, CASES / "ids_module.py", hyperparameters(killed), ranks=RANKS)

    assert second.returncode == 0, second.stderr[-3000:]
    assert second.report(0)["resumed_from"] == {"epochs_completed": 2, "steps_into_epoch": 0}
    assert [line.split()[0] for line in second.epoch_lines()] == ["epoch=3", "epoch=4"]

    straight = fresh_tree(tmp_path / "straight")
    uninterrupted = run_trainer(straight, CASES / "ids_module.py", hyperparameters(straight), ranks=RANKS)
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    for rank in range(RANKS):
        for resumed, reference in zip(second.weights(rank), uninterrupted.weights(0), strict=True):
            np.testing.assert_allclose(resumed, reference, rtol=1e-5, atol=1e-6)
    # Epochs 3 and 4 of the restart saw the records the uninterrupted run saw in its epochs 3 and 4.
    for rank in range(RANKS):
        assert step_ids(killed, rank)[-2 * STEPS :] == step_ids(straight, rank)[-2 * STEPS :]
