"""hvd.DistributedOptimizer + model.fit and the Horovod Keras callbacks on TF 2.21, Keras 3 and tf-keras.

One mpirun job per (Keras flavour, rank count) runs horovod_workers/fit_worker.py on rank-specific
data, once through horovod.tensorflow.keras and once through horovod.keras; the tests read what every
rank wrote.
"""

from __future__ import annotations

import numpy as np
import pytest
from horovod_workers.launch import (
    KerasFlavour,
    RankOutputs,
    arrays_with_prefix,
    assert_bit_identical_across_ranks,
    max_abs_difference,
    run_ranks,
)

pytestmark = pytest.mark.timeout(900)

TF_KERAS_MODULE = "horovod.tensorflow.keras"
STANDALONE_MODULE = "horovod.keras"
CASES = [(flavour, ranks) for flavour in KerasFlavour for ranks in (2, 3)]
MODULES = [TF_KERAS_MODULE, STANDALONE_MODULE]
STEPS_PER_EPOCH = 4  # fit_worker.STEPS


@pytest.fixture(scope="module", params=CASES, ids=[f"{flavour.value}-np{ranks}" for flavour, ranks in CASES])
def fit_run(request, tmp_path_factory) -> list[RankOutputs]:
    flavour, ranks = request.param
    outputs = run_ranks(
        "fit_worker.py", ranks, flavour, tmp_path_factory.mktemp(f"fit-{flavour.value}-{ranks}")
    )
    for rank_outputs in outputs:
        assert rank_outputs.record["flavour"] == flavour.value, "the ranks ran another Keras than requested"
        assert rank_outputs.record["size"] == ranks
    return outputs


@pytest.fixture(params=MODULES)
def module(request) -> str:
    """The Horovod Keras front end the scenario used."""
    return request.param


def assert_close(actual: list[np.ndarray], expected: list[np.ndarray], what: str) -> None:
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{what}, variable {index}")


def test_fit_averages_gradients_like_one_process_on_all_ranks_data(fit_run, module):
    assert_bit_identical_across_ranks(fit_run, f"{module}/average/weights")
    assert_bit_identical_across_ranks(fit_run, f"{module}/average/optimizer")
    weights = arrays_with_prefix(fit_run[0], f"{module}/average/weights")
    assert_close(
        weights, arrays_with_prefix(fit_run[0], f"{module}/average/reference_weights"), "weights vs reference"
    )
    # Momentum slots (and the iteration count) match the single-process run as well.
    assert_close(
        arrays_with_prefix(fit_run[0], f"{module}/average/optimizer"),
        arrays_with_prefix(fit_run[0], f"{module}/average/reference_optimizer"),
        "optimizer variables vs reference",
    )
    for rank, outputs in enumerate(fit_run):
        local_only = arrays_with_prefix(outputs, f"{module}/average/local_only_weights")
        assert max_abs_difference(weights, local_only) > 1e-3, (
            f"rank {rank}: the distributed weights equal an un-averaged run on the rank's own data"
        )


def test_backward_passes_per_step_averages_over_passes_and_ranks(fit_run):
    # Only horovod.tensorflow.keras: horovod.keras.DistributedOptimizer has no such parameter upstream.
    module = TF_KERAS_MODULE
    assert_bit_identical_across_ranks(fit_run, f"{module}/bpps/weights")
    assert_close(
        arrays_with_prefix(fit_run[0], f"{module}/bpps/weights"),
        arrays_with_prefix(fit_run[0], f"{module}/bpps/reference_weights"),
        "weights vs single process stepping once per two batches of every rank",
    )
    assert all(outputs.record[module]["bpps_iterations"] == STEPS_PER_EPOCH for outputs in fit_run)


def test_broadcast_callback_makes_ranks_identical(fit_run, module):
    initial = [arrays_with_prefix(outputs, f"{module}/callbacks/initial") for outputs in fit_run]
    assert max_abs_difference(initial[0], initial[1]) > 1e-3, "ranks started from the same weights"
    assert_bit_identical_across_ranks(fit_run, f"{module}/callbacks/weights")
    assert_bit_identical_across_ranks(fit_run, f"{module}/callbacks/optimizer")


def test_metric_average_callback_logs_the_mean_on_every_rank(fit_run, module):
    before = [outputs.record[module]["logs_before_average"] for outputs in fit_run]
    after = [outputs.record[module]["logs_after_average"] for outputs in fit_run]
    assert len(after[0]) == 2
    assert set(after[0][0]) >= {"loss", "mae", "val_loss", "val_mae"}
    for epoch, epoch_logs in enumerate(after[0]):
        for name, averaged in epoch_logs.items():
            per_rank = [rank_before[epoch][name] for rank_before in before]
            assert max(per_rank) - min(per_rank) > 1e-6, (
                f"{name}: per-rank values coincide, nothing to average"
            )
            assert averaged == pytest.approx(float(np.mean(per_rank)), rel=1e-6), f"epoch {epoch} {name}"
            for rank, rank_after in enumerate(after[1:], start=1):
                assert rank_after[epoch][name] == averaged, f"epoch {epoch} {name} differs on rank {rank}"
    for outputs in fit_run:
        history = outputs.record[module]["history"]
        for name, values in history.items():
            assert values == [epoch_logs[name] for epoch_logs in after[0]], (
                f"History.{name} is not the average"
            )


def expected_warmup_rate(initial_lr: float, ranks: int, epoch: int, batch: int) -> float:
    # Horovod's warmup: from initial_lr / size to initial_lr over warmup_epochs (Goyal et al.), per batch.
    progress = epoch + (batch + 1) / STEPS_PER_EPOCH
    return initial_lr / ranks * (progress * (ranks - 1) / 2 + 1)


def test_learning_rate_callbacks_set_the_rate_each_batch_trains_with(fit_run, module):
    ranks = len(fit_run)
    expected = [
        *(
            expected_warmup_rate(0.1, ranks, epoch, batch)
            for epoch in (0, 1)
            for batch in range(STEPS_PER_EPOCH)
        ),
        *([0.0] * STEPS_PER_EPOCH),
    ]
    for outputs in fit_run:
        assert outputs.record[module]["lr_per_batch"] == pytest.approx(expected, rel=1e-6)
        assert outputs.record[module]["lr_history"] == pytest.approx(
            [expected[3], expected[7], 0.0], rel=1e-6
        )
        assert outputs.record[module]["lr_warnings"] == [], (
            "SGD without momentum needs no momentum correction"
        )


def test_learning_rate_zero_freezes_the_weights(fit_run, module):
    # The rate is read by the compiled train step: 0 in epoch 2 means no change in epoch 2.
    epoch1 = arrays_with_prefix(fit_run[0], f"{module}/lr/weights_epoch1")
    epoch2 = arrays_with_prefix(fit_run[0], f"{module}/lr/weights_epoch2")
    assert max_abs_difference(arrays_with_prefix(fit_run[0], f"{module}/lr/weights_epoch0"), epoch1) > 1e-4
    assert max_abs_difference(epoch1, epoch2) == 0.0


def test_mixed_precision_overflow_on_one_rank_skips_the_step_on_every_rank(fit_run):
    # Keras 3's LossScaleOptimizer used to skip the inner (allreducing) apply on the overflowing rank
    # only: the ranks fell out of step and the job failed at its end.
    module = TF_KERAS_MODULE
    assert {outputs.record[module]["mixed_optimizer"] for outputs in fit_run} <= {
        "LossScaleOptimizer",
        "LossScaleOptimizerV3",
    }
    # Initial scale 2**15, halved once: one skipped step, on every rank alike.
    assert [outputs.record[module]["mixed_loss_scale"] for outputs in fit_run] == [2.0**14] * len(fit_run)
    assert_bit_identical_across_ranks(fit_run, f"{module}/mixed/weights")
    trained = arrays_with_prefix(fit_run[0], f"{module}/mixed/weights")
    assert max_abs_difference(arrays_with_prefix(fit_run[0], f"{module}/mixed/initial"), trained) > 1e-4
