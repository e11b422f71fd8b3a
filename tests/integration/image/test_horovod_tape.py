"""horovod.tensorflow on TF 2.21 with Keras 3 and tf-keras model variables, on 2 and 3 real MPI ranks.

One mpirun job per (Keras flavour, rank count) runs horovod_workers/tape_worker.py; the tests read
what every rank wrote and check the reductions against the ranks' local gradients.
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

CASES = [(flavour, ranks) for flavour in KerasFlavour for ranks in (2, 3)]


@pytest.fixture(scope="module", params=CASES, ids=[f"{flavour.value}-np{ranks}" for flavour, ranks in CASES])
def tape_run(request, tmp_path_factory) -> list[RankOutputs]:
    flavour, ranks = request.param
    outputs = run_ranks(
        "tape_worker.py", ranks, flavour, tmp_path_factory.mktemp(f"tape-{flavour.value}-{ranks}")
    )
    for rank_outputs in outputs:
        assert rank_outputs.record["flavour"] == flavour.value, "the ranks ran another Keras than requested"
        assert rank_outputs.record["size"] == ranks
    return outputs


def local_gradients(outputs: list[RankOutputs], prefix: str) -> list[list[np.ndarray]]:
    """[rank][variable] local (un-reduced) gradients."""
    return [arrays_with_prefix(rank_outputs, prefix) for rank_outputs in outputs]


def mean_over_ranks(per_rank: list[list[np.ndarray]]) -> list[np.ndarray]:
    return [
        np.mean(np.stack([grads[i] for grads in per_rank]).astype(np.float64), axis=0)
        for i in range(len(per_rank[0]))
    ]


def assert_close(actual: list[np.ndarray], expected: list[np.ndarray], tolerance: float, what: str) -> None:
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        np.testing.assert_allclose(
            got, want, rtol=tolerance, atol=tolerance, err_msg=f"{what}, variable {index}"
        )


def assert_ranks_really_differ(per_rank: list[list[np.ndarray]], what: str) -> None:
    # Otherwise "equals the mean" would hold for an un-reduced gradient too.
    assert max_abs_difference(per_rank[0], per_rank[1]) > 1e-3, (
        f"{what}: local gradients of ranks 0 and 1 coincide"
    )


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_average_equals_mean_of_local_gradients(tape_run, mode):
    local = local_gradients(tape_run, "dense/local")
    assert_ranks_really_differ(local, "dense")
    prefix = f"dense/{mode}/average"
    assert_bit_identical_across_ranks(tape_run, prefix)
    assert_close(arrays_with_prefix(tape_run[0], prefix), mean_over_ranks(local), 1e-5, prefix)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_sum_equals_sum_of_local_gradients(tape_run, mode):
    local = local_gradients(tape_run, "dense/local")
    prefix = f"dense/{mode}/sum"
    assert_bit_identical_across_ranks(tape_run, prefix)
    expected = [mean * len(tape_run) for mean in mean_over_ranks(local)]
    assert_close(arrays_with_prefix(tape_run[0], prefix), expected, 1e-4, prefix)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_fp16_compression_averages_within_half_precision(tape_run, mode):
    local = local_gradients(tape_run, "dense/local")
    prefix = f"dense/{mode}/fp16"
    assert_bit_identical_across_ranks(tape_run, prefix)
    reduced = arrays_with_prefix(tape_run[0], prefix)
    assert all(gradient.dtype == np.float32 for gradient in reduced), (
        "fp16 compression must decompress to float32"
    )
    expected = mean_over_ranks(local)
    for index, (got, want) in enumerate(zip(reduced, expected, strict=True)):
        np.testing.assert_allclose(
            got, want, rtol=2e-3, atol=2e-3 * np.max(np.abs(want)), err_msg=f"{prefix}/{index}"
        )


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("sparse_handling", ["sparse_as_dense", "sparse"])
def test_embedding_gradients_are_averaged(tape_run, mode, sparse_handling):
    assert all(outputs.record["embedding_local_gradient_is_sparse"] for outputs in tape_run), (
        "the embedding gradient should be tf.IndexedSlices, or sparse_as_dense tests nothing"
    )
    if sparse_handling == "sparse_as_dense":
        assert all(outputs.record[f"embedding_{mode}_sparse_as_dense_is_dense"] for outputs in tape_run)
    local = local_gradients(tape_run, "embedding/local")
    assert_ranks_really_differ(local, "embedding")
    prefix = f"embedding/{mode}/{sparse_handling}"
    assert_bit_identical_across_ranks(tape_run, prefix)
    assert_close(arrays_with_prefix(tape_run[0], prefix), mean_over_ranks(local), 1e-5, prefix)


def test_broadcast_variables_copies_model_and_optimizer_state_from_root(tape_run):
    for part in ("model", "optimizer"):
        root_before = arrays_with_prefix(tape_run[0], f"bcast/before/{part}")
        other_before = arrays_with_prefix(tape_run[1], f"bcast/before/{part}")
        # The Adam step count is the same everywhere; the weights and moments must not be.
        assert max_abs_difference(root_before, other_before) > 1e-4, (
            f"{part} state did not differ before broadcast"
        )
        assert_bit_identical_across_ranks(tape_run, f"bcast/after/{part}")
        after = arrays_with_prefix(tape_run[1], f"bcast/after/{part}")
        for index, (got, want) in enumerate(zip(after, root_before, strict=True)):
            assert np.array_equal(got, want), f"{part} variable {index} is not rank 0's value after broadcast"


def test_training_loop_with_broadcast_after_first_step_keeps_ranks_identical(tape_run):
    initial = [arrays_with_prefix(outputs, "loop/initial") for outputs in tape_run]
    assert max_abs_difference(initial[0], initial[1]) > 1e-3, "ranks started from the same weights"
    assert_bit_identical_across_ranks(tape_run, "loop/final/model")
    assert_bit_identical_across_ranks(tape_run, "loop/final/optimizer")
    assert all(outputs.record["loop_optimizer_iterations"] == 4 for outputs in tape_run)
