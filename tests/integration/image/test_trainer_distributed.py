"""The managed trainer on 2 and 3 Horovod ranks under real mpirun: exactly-once data with equal steps,
identical weights, metrics that are the cross-rank mean."""

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "trainer_cases"))

import trainer_data as data
from trainer_harness import CASES, run_trainer, step_ids

EPOCHS = 2


@pytest.mark.parametrize(
    ("ranks", "records", "files", "writer"),
    [
        (2, 53, 5, data.write_npz),  # files >= ranks: file-level, balanced by size
        (3, 47, 2, data.write_tfrecord),  # files < ranks: record-level, through parse_record
        (2, 31, 1, data.write_csv),  # one file: record-level, CSV reader
        (3, 29, 1, data.write_npz),
    ],
    ids=["2ranks-5npz", "3ranks-2tfrecord", "2ranks-1csv", "3ranks-1npz"],
)
def test_every_record_once_per_epoch_equal_steps_identical_weights(tmp_path, ranks, records, files, writer):
    writer(tmp_path / "input" / "data" / "train", records, files)
    (tmp_path / "ids").mkdir()
    hyperparameters = {"epochs": EPOCHS, "batch_size": 4 * ranks, "seed": 7, "ids_dir": str(tmp_path / "ids")}

    run = run_trainer(tmp_path, CASES / "ids_module.py", hyperparameters, ranks=ranks)

    assert run.returncode == 0, run.stderr[-3000:]
    reports = [run.report(rank) for rank in range(ranks)]
    steps = reports[0]["steps_per_epoch"]
    per_rank_steps = [step_ids(tmp_path, rank) for rank in range(ranks)]
    assert [len(rank_steps) for rank_steps in per_rank_steps] == [EPOCHS * steps] * ranks
    for epoch in range(EPOCHS):
        seen = Counter(
            record
            for rank_steps in per_rank_steps
            for ids in rank_steps[epoch * steps : (epoch + 1) * steps]
            for record in ids
        )
        assert seen == Counter(range(records)), f"epoch {epoch + 1}: not every record exactly once"
    assert sum(report["records"] for report in reports) == records
    assert all(report["steps_per_epoch"] == steps for report in reports)

    first = run.weights(0)
    for rank in range(1, ranks):
        for mine, theirs in zip(run.weights(rank), first, strict=True):
            np.testing.assert_array_equal(mine, theirs)

    for epoch_index in range(EPOCHS):
        locals_ = [report["epochs"][epoch_index]["local"] for report in reports]
        mean = reports[0]["epochs"][epoch_index]["mean"]
        for name, value in mean.items():
            assert value == pytest.approx(np.mean([local[name] for local in locals_]), rel=1e-9)
        assert all(report["epochs"][epoch_index]["mean"] == mean for report in reports)
    last = run.epoch_lines()[-1]
    assert last.startswith(f"epoch={EPOCHS} loss={reports[0]['epochs'][-1]['mean']['loss']:.4f}")
    assert len(run.epoch_lines()) == EPOCHS, "only rank 0 logs, once per epoch"
    assert "\r" not in run.stdout


def test_sharded_by_s3_key_splits_only_between_local_ranks(tmp_path):
    # One host: the host's files are split between its two local ranks, each record once.
    data.write_npz(tmp_path / "input" / "data" / "train", 21, 3)
    (tmp_path / "ids").mkdir()
    hyperparameters = {"epochs": 1, "batch_size": 4, "ids_dir": str(tmp_path / "ids")}

    run = run_trainer(
        tmp_path, CASES / "ids_module.py", hyperparameters, ranks=2, distribution="ShardedByS3Key"
    )

    assert run.returncode == 0, run.stderr[-3000:]
    seen = Counter(record for rank in range(2) for ids in step_ids(tmp_path, rank) for record in ids)
    assert seen == Counter(range(21))
