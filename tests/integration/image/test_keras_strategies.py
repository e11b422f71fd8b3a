"""Keras 3 `fit`, `evaluate`, `predict` and callbacks under tf.distribute, as patched in the image
(container/keras/patches 0001-0003).

keras_workers/fit_scenario.py runs once per case: as 2 MultiWorkerMirroredStrategy workers on
localhost ports, as one process with MirroredStrategy over 2 logical CPUs, and as the single-process
reference on the same global batches. Each case writes into its own "shared" folder, as workers
writing to one checkpoint location would.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from keras_workers.launch import WorkerOutputs, assert_identical, max_abs_difference, run_workers

pytestmark = pytest.mark.timeout(900)

WORKERS = 2
# Rows per CSV file for the FILE auto-shard case: uneven, so workers get different batch counts.
FILE_ROWS = (10, 7, 13, 6)
# float32 sums of the same values in another order.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


def write_csv_files(folder: Path) -> tuple[int, float]:
    """The FILE case's files: (rows, sum of labels)."""
    folder.mkdir(parents=True)
    generator = np.random.RandomState(3)
    label_sum = 0.0
    for number, rows in enumerate(FILE_ROWS):
        data = generator.uniform(-1, 1, size=(rows, 5)).astype("float32")
        label_sum += float(data[:, 4].sum())
        np.savetxt(folder / f"part-{number}.csv", data, delimiter=",", fmt="%.6f")
    return sum(FILE_ROWS), label_sum


def run_case(tmp_path_factory, mode: str, workers: int) -> tuple[list[WorkerOutputs], Path]:
    root = tmp_path_factory.mktemp(mode)
    shared = root / "shared"
    write_csv_files(shared / "files")
    outputs = run_workers("fit_scenario.py", workers, root / "out", mode, str(shared), str(WORKERS))
    return outputs, shared


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> WorkerOutputs:
    return run_case(tmp_path_factory, "single", 0)[0][0]


@pytest.fixture(scope="module", params=["mwms", "mirrored"])
def case(request, tmp_path_factory) -> tuple[str, list[WorkerOutputs], Path]:
    workers = WORKERS if request.param == "mwms" else 0
    outputs, shared = run_case(tmp_path_factory, request.param, workers)
    return request.param, outputs, shared


def test_fit_gives_identical_weights_equal_to_one_process_on_the_global_batch(case, reference):
    mode, outputs, _ = case
    for prefix in ("fit/weights", "fit/optimizer", "resume/weights", "unknown/weights"):
        assert_identical(outputs, prefix)
        difference = max_abs_difference(outputs[0].list(prefix), reference.list(prefix))
        print(f"{mode} {prefix}: max abs difference to one process {difference:.3g}")
        for got, want in zip(outputs[0].list(prefix), reference.list(prefix), strict=True):
            np.testing.assert_allclose(got, want, **TOLERANCE, err_msg=f"{mode} {prefix}")


def test_losses_and_metrics_are_reduced_across_workers(case, reference):
    mode, outputs, _ = case
    history = reference.record["fit"]["history"]
    for worker in outputs:
        got = worker.record["fit"]
        assert got["history"].keys() == history.keys()
        for name, values in history.items():
            np.testing.assert_allclose(got["history"][name], values, **TOLERANCE, err_msg=f"{mode} {name}")
        for name, value in reference.record["fit"]["evaluate"].items():
            assert got["evaluate"][name] == pytest.approx(value, rel=1e-5), f"{mode} evaluate {name}"
        # Per-step logs are the mean over replicas, the same on every worker.
        assert got["batch_losses"] == outputs[0].record["fit"]["batch_losses"]
    # Every training example counted once per epoch, by the global metric.
    rows = len(reference.record["fit"]["batch_losses"]) // 2 * 8 * WORKERS
    assert history["examples"] == [rows, rows]


def test_step_results_are_means_over_replicas_in_one_all_reduce_per_dtype(case):
    """Patch 0002: a step's loss and metrics, averaged over every replica of every worker as on one
    worker, shapes and dtypes kept, in one collective for each dtype rather than one per value; a value
    with no device of its own (a captured constant) included."""
    mode, outputs, _ = case
    for worker in outputs:
        got = worker.record["step_results"]
        replicas = worker.record["replicas"]
        mean_id = (replicas - 1) / 2
        want = {"same": 0.25, "loss": mean_id + 1, "per_class": [mean_id, 2 * mean_id, 3 * mean_id],
                "examples": (mean_id + 1) * 10, "weight": mean_id * 4}  # fmt: skip
        assert got["values"].keys() == want.keys(), mode
        for name, value in want.items():
            assert np.shape(got["values"][name]) == np.shape(value), (mode, name)
            np.testing.assert_allclose(got["values"][name], value, **TOLERANCE, err_msg=f"{mode} {name}")
        assert got["dtypes"] == {name: "float32" for name in want} | {"weight": "float64"}, mode
        # Multi-worker: float32 and float64, one all-reduce each. One process (MirroredStrategy)
        # averages its replicas' local results without collectives.
        assert got["all_reduces"] == (2 if mode == "mwms" else 0), (mode, got)


def test_predict_returns_every_example_in_order(case, reference):
    _, outputs, _ = case
    for worker in outputs:
        np.testing.assert_allclose(worker.list("predict")[0], reference.list("predict")[0], **TOLERANCE)


def test_auto_shard_policies_are_honoured(case, reference):
    """DATA and FILE: each example evaluated once across workers (FILE with uneven files, so workers
    have different numbers of batches). First step: DATA splits the global batch between workers,
    OFF gives every worker the dataset from its start (the same first rows on every worker)."""
    mode, outputs, _ = case
    workers = len(outputs)
    expected = reference.record["sharding"]
    assert expected["FILE"]["examples"] == sum(FILE_ROWS)
    for worker in outputs:
        got = worker.record["sharding"]
        for policy in ("DATA", "FILE"):
            assert got[policy]["examples"] == expected[policy]["examples"], (mode, policy, got)
            assert got[policy]["label_sum"] == pytest.approx(expected[policy]["label_sum"], rel=1e-5)
        global_batch = expected["DATA_first_step"]["examples"]
        assert got["DATA_first_step"]["examples"] == global_batch
        assert got["DATA_first_step"]["label_sum"] == pytest.approx(got["first_global_batch_label_sum"])
        if workers == 1:
            # One worker (MirroredStrategy): nothing to shard, OFF reads what DATA reads.
            assert got["OFF_first_step"] == pytest.approx(got["DATA_first_step"])
        else:
            assert got["OFF_first_step"]["examples"] == global_batch
            assert got["OFF_first_step"]["label_sum"] == pytest.approx(
                workers * got["first_replica_batch_label_sum"]
            ), (mode, got)


def test_unknown_cardinality_epochs_see_every_example_once(case, reference):
    _, outputs, _ = case
    assert reference.record["unknown"]["cardinality"] == -2  # tf.data.UNKNOWN_CARDINALITY
    rows = reference.record["fit"]["history"]["examples"][0]
    for worker in outputs:
        assert [logs["examples"] for logs in worker.record["unknown"]["logs"]] == [rows, rows]


def test_checkpoints_are_written_by_the_chief_and_the_others_save_to_temporary_folders(case):
    mode, outputs, shared = case
    assert sorted(path.name for path in shared.glob("ckpt-*.keras")) == ["ckpt-1.keras", "ckpt-2.keras"]
    assert sorted(path.name for path in (shared / "backup").iterdir()) == [
        "latest.weights.h5",
        "training_metadata.json",
    ]
    chief_saves = outputs[0].record["fit"]["saves"]
    backup = str(shared / "backup" / "latest.weights.h5")
    # Callbacks run in list order: ModelCheckpoint, then BackupAndRestore, at each epoch's end.
    assert chief_saves == [str(shared / "ckpt-1.keras"), backup, str(shared / "ckpt-2.keras"), backup]
    for worker in outputs[1:]:
        saves = worker.record["fit"]["saves"]
        # The same saves (saving may be collective), none of them into the shared folder.
        assert len(saves) == len(chief_saves), saves
        assert not any(Path(path).is_relative_to(shared) for path in saves), saves
        assert not any(Path(path).exists() for path in saves), f"{mode}: temporary saves left: {saves}"
    for worker in outputs:
        assert worker.record["leftover_temporary_folders"] == []


def test_tensorboard_logs_of_the_chief_only(case):
    mode, outputs, shared = case
    event_files = list((shared / "tensorboard" / "train").glob("events.out.tfevents.*"))
    writers = {int(re.search(r"\.(\d+)\.\d+\.v2$", path.name).group(1)) for path in event_files}
    assert writers == {outputs[0].record["pid"]}, (mode, [path.name for path in event_files])


def test_backup_and_restore_resumes_after_the_last_backed_up_epoch(case, reference):
    _, outputs, _ = case
    for worker in outputs:
        # The backup holds epochs 0 and 1: the restart runs epoch 2 only.
        assert worker.record["resume"]["epochs"] == [2]
    assert reference.record["resume"]["epochs"] == [2]


def test_early_stopping_stops_every_worker_after_the_same_epoch(case):
    _, outputs, _ = case
    assert [worker.record["early_stopping_epochs"] for worker in outputs] == [2] * len(outputs)
