"""A user script shaped like Horovod's tensorflow2_keras_mnist example trains and saves on 2 ranks."""

from __future__ import annotations

import pytest
from horovod_workers.launch import KerasFlavour, assert_bit_identical_across_ranks, run_ranks

pytestmark = pytest.mark.timeout(900)

EPOCHS = 3  # keras_mnist_example.py


@pytest.mark.parametrize("flavour", list(KerasFlavour), ids=[flavour.value for flavour in KerasFlavour])
def test_mnist_style_example_trains_and_rank0_saves(flavour, tmp_path):
    outputs = run_ranks("example_runner.py", 2, flavour, tmp_path)
    assert [outputs_.record["flavour"] for outputs_ in outputs] == [flavour.value] * 2

    assert sorted(path.name for path in tmp_path.glob("checkpoint-*")) == [
        f"checkpoint-{epoch}.keras" for epoch in range(1, EPOCHS + 1)
    ]
    assert_bit_identical_across_ranks(outputs, "weights")

    history = outputs[0].record["history"]
    assert history["loss"][-1] < 0.5 * history["loss"][0], f"the example did not learn: {history['loss']}"
    for rank_outputs in outputs[1:]:
        assert rank_outputs.record["history"] == history, (
            "MetricAverageCallback left different logs on the ranks"
        )
    # LearningRateWarmupCallback ends at initial_lr = 0.001 * size.
    assert history["lr"][-1] == pytest.approx(0.002, rel=1e-6)

    for loader in ("hvd", "plain"):
        assert outputs[0].record[f"{loader}_restored_weights_equal"], f"{loader} load_model: weights differ"
        assert outputs[0].record[f"{loader}_restored_optimizer"] == "Adam"
