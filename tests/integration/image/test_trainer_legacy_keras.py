"""tf-keras (TF_USE_LEGACY_KERAS=1) on two Horovod ranks, compiled from hyperparameters, with linear
learning-rate scaling and warmup."""

import numpy as np
import pytest
from sagetrain.legacy_keras import TF_USE_LEGACY_KERAS_VAR
from trainer_cases import trainer_data as data
from trainer_cases.trainer_harness import CASES, run_trainer


def test_tf_keras_model_trains_identically_on_two_ranks_with_scaled_warmed_up_rate(tmp_path):
    data.write_npz(tmp_path / "input" / "data" / "train", 40, 1)
    data.write_npz(tmp_path / "input" / "data" / "test", 10, 1)
    hyperparameters = {
        "epochs": 3,
        "batch_size": 8,
        "optimizer": "sgd",
        "learning_rate": 0.01,
        "loss": "mse",
        "metrics": ["mae"],
        "lr_scaling": "linear",
        "warmup_epochs": 2,
    }

    run = run_trainer(
        tmp_path,
        CASES / "legacy_module.py",
        hyperparameters,
        ranks=2,
        extra_env={TF_USE_LEGACY_KERAS_VAR: "1"},
    )

    assert run.returncode == 0, run.stderr[-3000:]
    reports = [run.report(rank) for rank in range(2)]
    for mine, theirs in zip(run.weights(1), run.weights(0), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    # 20 records per rank, 4 per step: 5 steps per epoch; warmup over 10 steps to 0.01 * 2 ranks.
    assert reports[0]["steps_per_epoch"] == 5
    rates = [epoch["learning_rate"] for epoch in reports[0]["epochs"]]
    assert rates[0] == pytest.approx(0.02 * 5 / 10)  # the last step of epoch 1 ran at step 5 of 10
    assert rates[1:] == pytest.approx([0.02, 0.02])
    assert [line.split()[1].split("=")[0] for line in run.epoch_lines()] == ["loss"] * 3
    assert "mae=" in run.epoch_lines()[-1]
    # Both exports load and agree: the tf-keras file with tf-keras, the SavedModel with TensorFlow alone.
    import tensorflow as tf
    import tf_keras

    inputs = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
    keras_model = tf_keras.models.load_model(tmp_path / "model" / "model.keras")
    expected = keras_model.predict(inputs, verbose=0)
    assert expected.shape == (3, 1)
    for mine, theirs in zip(keras_model.get_weights(), run.weights(0), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    serving = tf.saved_model.load(str(tmp_path / "model" / "1")).signatures["serving_default"]
    served = next(iter(serving(tf.constant(inputs)).values())).numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
