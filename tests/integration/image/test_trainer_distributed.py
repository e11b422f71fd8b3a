"""The managed trainer on 2 and 3 Horovod ranks under real mpirun: exactly-once data with equal steps,
identical weights, metrics that are the cross-rank mean; uneven shards weighted per record; rank 0's
initial state broadcast."""

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from trainer_cases import trainer_data as data
from trainer_cases.trainer_harness import CASES, run_trainer, step_ids

EPOCHS = 2


def assert_every_record_once_per_epoch(
    per_rank_steps: Sequence[Sequence[Sequence[int]]], steps: int, records: int, epochs: int
) -> None:
    """Each epoch (``steps`` steps on every rank) read every record id in ``range(records)`` exactly once
    over all ranks; ``per_rank_steps[rank]`` lists the ids of each step that rank ran, in order."""
    assert all(len(rank_steps) == epochs * steps for rank_steps in per_rank_steps), "unequal step counts"
    for epoch in range(epochs):
        seen = Counter(
            record
            for rank_steps in per_rank_steps
            for ids in rank_steps[epoch * steps : (epoch + 1) * steps]
            for record in ids
        )
        assert seen == Counter(range(records)), f"epoch {epoch + 1}: not every record exactly once"


def train_and_check_every_rank(
    tmp_path: Path, engine: str, ranks: int, records: int, epochs: int, extra: dict[str, object]
) -> list[list[list[int]]]:
    """Train on the channel written under ``tmp_path`` with ``extra`` hyperparameters; check every record
    once per epoch, equal steps, identical weights, metrics that are the cross-rank mean and rank 0's
    epoch lines; each rank's steps' record ids."""
    (tmp_path / "ids").mkdir()
    hyperparameters = {
        "epochs": epochs,
        "batch_size": 4 * ranks,
        "seed": 7,
        "ids_dir": str(tmp_path / "ids"),
        **extra,
    }

    run = run_trainer(tmp_path, CASES / "ids_module.py", hyperparameters, ranks=ranks, engine=engine)

    assert run.returncode == 0, run.stderr[-3000:]
    reports = [run.report(rank) for rank in range(ranks)]
    steps = reports[0]["steps_per_epoch"]
    per_rank_steps = [step_ids(tmp_path, rank) for rank in range(ranks)]
    assert_every_record_once_per_epoch(per_rank_steps, steps, records, epochs)
    assert sum(report["records"] for report in reports) == records
    assert all(report["steps_per_epoch"] == steps for report in reports)

    first = run.weights(0)
    for rank in range(1, ranks):
        for mine, theirs in zip(run.weights(rank), first, strict=True):
            np.testing.assert_array_equal(mine, theirs)

    for epoch_index in range(epochs):
        locals_ = [report["epochs"][epoch_index]["local"] for report in reports]
        mean = reports[0]["epochs"][epoch_index]["mean"]
        for name, value in mean.items():
            assert value == pytest.approx(np.mean([local[name] for local in locals_]), rel=1e-9)
        assert all(report["epochs"][epoch_index]["mean"] == mean for report in reports)
    last = run.epoch_lines()[-1]
    assert last.startswith(f"epoch={epochs} loss={reports[0]['epochs'][-1]['mean']['loss']:.4f}")
    assert len(run.epoch_lines()) == epochs, "only rank 0 logs, once per epoch"
    assert "\r" not in run.stdout
    return per_rank_steps


@pytest.mark.parametrize(
    ("engine", "ranks", "records", "files", "writer"),
    [
        ("horovod", 2, 53, 5, data.write_npz),  # files >= ranks: file-level, balanced by size
        ("horovod", 3, 47, 2, data.write_tfrecord),  # files < ranks: record-level, through parse_record
        ("horovod", 2, 31, 1, data.write_csv),  # one file: record-level, CSV reader
        ("horovod", 3, 29, 1, data.write_npz),
        # One process per host with TF_CONFIG: the trainer's collectives are MultiWorkerMirroredStrategy's.
        ("multi_worker_mirrored", 2, 53, 5, data.write_npz),
        ("multi_worker_mirrored", 3, 47, 2, data.write_tfrecord),
        # Many TFRecord files: file-level, each rank counting its files' records from their headers.
        ("horovod", 2, 61, 40, data.write_tfrecord),
        ("multi_worker_mirrored", 2, 61, 40, data.write_tfrecord),
    ],
    ids=["2ranks-5npz", "3ranks-2tfrecord", "2ranks-1csv", "3ranks-1npz", "mwms-2workers-5npz",
         "mwms-3workers-2tfrecord", "2ranks-40tfrecord", "mwms-2workers-40tfrecord"],
)  # fmt: skip
def test_every_record_once_per_epoch_equal_steps_identical_weights(
    tmp_path, engine, ranks, records, files, writer
):
    writer(tmp_path / "input" / "data" / "train", records, files)
    train_and_check_every_rank(tmp_path, engine, ranks, records, EPOCHS, {})


@pytest.mark.parametrize("engine", ["horovod", "multi_worker_mirrored"])
def test_unshuffled_epochs_read_the_same_batches_every_epoch(tmp_path, engine):
    """``shuffle_buffer`` 0: the epochs are one repeated pipeline read by one iterator; every epoch still
    reads every record once, each rank the same batches every epoch, and the weights end identical."""
    epochs = 3
    data.write_tfrecord(tmp_path / "input" / "data" / "train", 61, 40)
    per_rank_steps = train_and_check_every_rank(tmp_path, engine, 2, 61, epochs, {"shuffle_buffer": 0})
    for rank_steps in per_rank_steps:
        steps = len(rank_steps) // epochs
        by_epoch = [rank_steps[epoch * steps : (epoch + 1) * steps] for epoch in range(epochs)]
        assert by_epoch == [by_epoch[0]] * epochs


def test_sharded_by_s3_key_splits_only_between_local_ranks(tmp_path):
    # One host: the host's files are split between its two local ranks, each record once.
    data.write_npz(tmp_path / "input" / "data" / "train", 21, 3)
    (tmp_path / "ids").mkdir()
    hyperparameters = {"epochs": 1, "batch_size": 4, "ids_dir": str(tmp_path / "ids")}

    run = run_trainer(
        tmp_path, CASES / "ids_module.py", hyperparameters, ranks=2, distribution="ShardedByS3Key"
    )

    assert run.returncode == 0, run.stderr[-3000:]
    per_rank_steps = [step_ids(tmp_path, rank) for rank in range(2)]
    assert_every_record_once_per_epoch(per_rank_steps, run.report(0)["steps_per_epoch"], 21, epochs=1)


def write_parts(directory: Path, sizes: Sequence[int]) -> int:
    """.npz files of ``sizes`` records (ids in file order); the total."""
    directory.mkdir(parents=True, exist_ok=True)
    x, y = data.records(sum(sizes))
    start = 0
    for index, size in enumerate(sizes):
        np.savez(directory / f"part-{index:03d}.npz", x=x[start : start + size], y=y[start : start + size])
        start += size
    return sum(sizes)


def one_process_on_global_batches(
    per_rank_steps: list[list[list[int]]], hyperparameters: dict, initial: list[np.ndarray], total: int
) -> list[np.ndarray]:
    """Plain Keras in this process: the same model from the same initial weights, one step per trainer step
    on the union of the ranks' batches of that step."""
    import tensorflow as tf
    from trainer_cases import ids_module

    x, y = data.records(total)
    model = ids_module.build_model({key: value for key, value in hyperparameters.items() if key != "ids_dir"})
    model.set_weights(initial)
    for batches in zip(*per_rank_steps, strict=True):
        ids = [record for batch in batches for record in batch]
        features, labels = tf.constant(x[ids]), tf.constant(y[ids])
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            loss = model.compute_loss(x=features, y=labels, y_pred=predictions)
        gradients = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
    return [np.asarray(variable) for variable in model.variables]


def test_uneven_file_shards_spread_records_and_weigh_every_record_alike(tmp_path):
    # .npz files of 17 and 10 records (830 and 690 bytes: within the 80% rule, so sharded by file).
    sizes, ranks = (17, 10), 2
    total = write_parts(tmp_path / "input" / "data" / "train", sizes)
    (tmp_path / "ids").mkdir()
    hyperparameters = {
        "epochs": EPOCHS,
        "batch_size": 8,
        "seed": 7,
        "init_seed": 3,
        "ids_dir": str(tmp_path / "ids"),
    }

    run = run_trainer(tmp_path, CASES / "ids_module.py", hyperparameters, ranks=ranks)

    assert run.returncode == 0, run.stderr[-3000:]
    reports = [run.report(rank) for rank in range(ranks)]
    assert sorted(report["records"] for report in reports) == sorted(sizes), "one file per rank"
    steps = 3  # ceil(10 / (8 // 2)) on every rank
    assert [report["steps_per_epoch"] for report in reports] == [steps] * ranks
    per_rank_steps = [step_ids(tmp_path, rank) for rank in range(ranks)]
    for report, rank_steps in zip(reports, per_rank_steps, strict=True):
        records, planned = report["records"], report["batch_sizes"]
        assert len(planned) == steps and sum(planned) == records
        assert max(planned) <= math.ceil(records / steps), f"{planned}: a batch holds the surplus"
        assert [len(ids) for ids in rank_steps] == planned * EPOCHS
    assert_every_record_once_per_epoch(per_rank_steps, steps, total, EPOCHS)
    final = run.weights(0)
    for mine, theirs in zip(run.weights(1), final, strict=True):
        np.testing.assert_array_equal(mine, theirs)

    # Batches of 6 and 4 records in one step: the step must equal one process on all 10 records.
    with np.load(tmp_path / "ids" / "init-rank-0.npz") as arrays:
        initial = [arrays[f"arr_{index}"] for index in range(len(arrays.files))]
    expected = one_process_on_global_batches(per_rank_steps, hyperparameters, initial, total)
    for index, (got, want) in enumerate(zip(final, expected, strict=True)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"variable {index}")


def test_rank_0_initial_state_is_broadcast(tmp_path):
    """Each rank initialises its own weights (seeded by rank); only the broadcast makes them start alike,
    so the job must end as a job whose ranks all started from rank 0's weights."""
    results = {}
    for name, by_rank in (("per-rank-init", True), ("rank-0-init", False)):
        root = tmp_path / name
        data.write_npz(root / "input" / "data" / "train", 24, 2)
        (root / "ids").mkdir()
        hyperparameters = {
            "epochs": 1,
            "batch_size": 8,
            "seed": 7,
            "init_seed": 100,
            "init_seed_by_rank": by_rank,
            "ids_dir": str(root / "ids"),
        }
        run = run_trainer(root, CASES / "ids_module.py", hyperparameters, ranks=2)
        assert run.returncode == 0, run.stderr[-3000:]
        results[name] = (root, run)

    root, run = results["per-rank-init"]
    with np.load(root / "ids" / "init-rank-0.npz") as zero, np.load(root / "ids" / "init-rank-1.npz") as one:
        assert not np.array_equal(zero["arr_0"], one["arr_0"]), "the ranks did not initialise differently"
    for mine, theirs in zip(run.weights(1), run.weights(0), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    reference = results["rank-0-init"][1]
    for got, want in zip(run.weights(0), reference.weights(0), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_an_empty_file_next_to_the_data_leaves_no_rank_without_records(tmp_path):
    train = tmp_path / "input" / "data" / "train"
    data.write_npz(train, 11, 1)
    (train / "part-999.npz").write_bytes(b"")
    (tmp_path / "ids").mkdir()

    run = run_trainer(
        tmp_path,
        CASES / "ids_module.py",
        {"epochs": 1, "batch_size": 4, "ids_dir": str(tmp_path / "ids")},
        ranks=2,
    )

    assert run.returncode == 0, run.stderr[-3000:]
    assert [run.report(rank)["records"] for rank in range(2)] == [6, 5]
    per_rank_steps = [step_ids(tmp_path, rank) for rank in range(2)]
    assert_every_record_once_per_epoch(per_rank_steps, run.report(0)["steps_per_epoch"], 11, epochs=1)
