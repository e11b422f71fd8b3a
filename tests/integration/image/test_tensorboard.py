"""TensorBoard in the image: `keras.callbacks.TensorBoard` writes scalars, histograms and the model's graph,
and `tf.summary.scalar` writes, on Keras 3 and under the legacy-Keras switch (tf-keras), in a new process
as a user's script runs; TensorBoard's own reader loads what they wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from tensorboard_events import event_tags

pytestmark = pytest.mark.timeout(300)

SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import keras
    import tensorflow as tf

    log_dir = sys.argv[1]
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.Adam(0.01), "mse", metrics=["mae"])
    x = np.random.RandomState(0).uniform(-1, 1, (64, 4)).astype("float32")
    model.fit(x, x.sum(axis=1), epochs=2, batch_size=16, validation_data=(x, x.sum(axis=1)), verbose=0,
              callbacks=[keras.callbacks.TensorBoard(log_dir=log_dir, histogram_freq=1)])
    with tf.summary.create_file_writer(log_dir + "/custom").as_default():
        tf.summary.scalar("throughput", 123.0, step=7)
    print(keras.__version__)
    """
)


@pytest.mark.parametrize("switch", [False, True], ids=["keras-3", "legacy-keras-switch"])
def test_the_tensorboard_callback_and_tf_summary_write_what_tensorboard_reads(tmp_path, switch):
    env = {name: value for name, value in os.environ.items() if "KERAS" not in name}
    if switch:
        env["SAGETRAIN_LEGACY_KERAS"] = "1"
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "logs")],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip().splitlines()[-1].startswith("2." if switch else "3."), completed.stdout
    runs = event_tags(tmp_path / "logs")
    assert sorted(runs) == ["custom", "train", "validation"], runs
    train = runs["train"]
    assert train["epoch_loss"] == [0, 1] and train["epoch_mae"] == [0, 1], train
    assert "keras" in train, train  # the model's graph, as TensorBoard's graph dashboard shows it
    histograms = [tag for tag in train if tag.endswith("/histogram")]
    assert len(histograms) == 4, train  # kernel and bias of both layers
    assert all(train[tag] == [0, 1] for tag in histograms), train
    assert runs["validation"]["epoch_loss"] == [0, 1], runs["validation"]
    assert runs["custom"] == {"throughput": [7]}
