"""SIGTERM mid-training on one rank: every rank stops at the same step, rank 0 checkpoints, exit 143; a
restart on the same /opt/ml tree continues there and ends with the weights of an uninterrupted run. And a
rank killed outright in epoch 3: the restart continues from the end of epoch 2, with the same result."""

import re
from pathlib import Path

import numpy as np
import pytest
from sagetrain.trainer.checkpoints import Progress
from trainer_cases import trainer_data as data
from trainer_cases.trainer_harness import CASES, run_trainer, step_ids

RANKS, RECORDS, EPOCHS, BATCH = 2, 37, 4, 8
STEPS = 5  # ceil(min(19, 18) / (8 // 2))


def fresh_tree(root: Path, write_train=data.write_npz, files: int = 3) -> Path:
    write_train(root / "input" / "data" / "train", RECORDS, files)
    data.write_npz(root / "input" / "data" / "validation", 9, 1)
    (root / "ids").mkdir(parents=True)
    return root


def hyperparameters(root: Path, **extra) -> dict:
    return {"epochs": EPOCHS, "batch_size": BATCH, "seed": 11, "ids_dir": str(root / "ids"), **extra}


@pytest.mark.parametrize(
    ("engine", "write_train", "files", "shuffle"),
    [
        ("horovod", data.write_npz, 3, {}),
        ("multi_worker_mirrored", data.write_npz, 3, {}),
        # Several TFRecord files per rank, counted from their frame headers: a resumed epoch must skip the
        # same records in the same order.
        ("horovod", data.write_tfrecord, 8, {}),
        # Unshuffled epochs, one repeated pipeline: stopped inside it, resumed by an epoch of its own, then
        # a new repeated pipeline for the last epoch.
        ("horovod", data.write_tfrecord, 8, {"shuffle_buffer": 0}),
    ],
    ids=["horovod-npz", "mwms-npz", "horovod-tfrecord", "horovod-tfrecord-unshuffled"],
)
def test_sigterm_checkpoints_and_restart_equals_uninterrupted_run(
    tmp_path, engine, write_train, files, shuffle
):
    interrupted = fresh_tree(tmp_path / "interrupted", write_train, files)
    folder = interrupted / "checkpoints"
    # Rank 1 alone is signalled, during the first step of epoch 3.
    first = run_trainer(
        interrupted,
        CASES / "ids_module.py",
        hyperparameters(interrupted, sigterm_at_step=2 * STEPS + 1, sigterm_rank=1, **shuffle),
        ranks=RANKS,
        engine=engine,
    )

    assert first.returncode != 0
    errors = [first.error(rank) for rank in range(RANKS)]
    assert all(error is not None for error in errors), first.stderr[-3000:]
    message = errors[0]["message"]
    # Every rank reports who wrote the checkpoint, not itself: rank 1 was signalled, rank 0 wrote.
    stop = re.fullmatch(
        rf"rank 0 \(host algo-1\) wrote the checkpoint {re.escape(str(folder))}/(\S+) "
        rf"\(epoch 3, step (\d+) of {STEPS}\) after SIGTERM",
        message,
    )
    assert stop, message
    assert all(error["message"] == message for error in errors), "ranks agree on where they stopped"
    stopped_at = int(stop.group(2))
    assert stop.group(1) == f"sagetrain-epoch000003-step{stopped_at:08d}.npz"
    assert [len(step_ids(interrupted, rank)) for rank in range(RANKS)] == [2 * STEPS + stopped_at] * RANKS
    assert len(first.epoch_lines()) == 2
    checkpoints = sorted(path.name for path in folder.iterdir())
    assert checkpoints == [f"sagetrain-epoch000002-step{STEPS:08d}.npz", stop.group(1)]
    written = [note for note in first.notes() if note.startswith("wrote the checkpoint ")]
    assert written == [
        f"wrote the checkpoint {folder / name} (epoch {epoch}, step {step} of {STEPS})"
        for name, epoch, step in [
            (f"sagetrain-epoch000001-step{STEPS:08d}.npz", 1, STEPS),
            (checkpoints[0], 2, STEPS),
            (checkpoints[1], 3, stopped_at),
        ]
    ], first.stderr[-3000:]
    resume_from = folder / checkpoints[1]
    if engine == "horovod":
        # As an older image named it (epochs completed, steps into the next): a name that sorts before the
        # end of epoch 2 although it holds more. The restart must still take it, at the position inside.
        progress = Progress.after_step(3, stopped_at, STEPS)
        older_name = f"sagetrain-epoch{progress.epochs_completed:06d}-step{progress.steps_into_epoch:08d}.npz"
        resume_from = resume_from.rename(folder / older_name)

    second = run_trainer(
        interrupted,
        CASES / "ids_module.py",
        hyperparameters(interrupted, **shuffle),
        ranks=RANKS,
        engine=engine,
    )

    assert second.returncode == 0, second.stderr[-3000:]
    report = second.report(0)
    assert report["resumed_from"] == {"epochs_completed": 2, "steps_into_epoch": stopped_at}
    assert f"resuming from the checkpoint {resume_from} (epoch 3, step {stopped_at} of {STEPS})" in (
        second.notes()
    ), second.stderr[-3000:]
    assert [epoch["epoch"] for epoch in report["epochs"]] == [3, 4]
    assert [line.split()[0] for line in second.epoch_lines()] == ["epoch=3", "epoch=4"]
    # Across both runs every record was trained on exactly once per epoch.
    total_steps = [len(step_ids(interrupted, rank)) for rank in range(RANKS)]
    assert total_steps == [EPOCHS * STEPS] * RANKS

    straight = fresh_tree(tmp_path / "straight", write_train, files)
    uninterrupted = run_trainer(
        straight, CASES / "ids_module.py", hyperparameters(straight, **shuffle), ranks=RANKS, engine=engine
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
    assert checkpoints[-1] == f"sagetrain-epoch000002-step{STEPS:08d}.npz", checkpoints

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
