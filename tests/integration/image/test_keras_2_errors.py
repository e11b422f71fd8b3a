"""Every Keras 2 spelling the failure verdict recognises (sagetrain/report/keras_2_code.py), run for real:
on the image's Keras 3 it fails with an error its entry's pattern matches, and under the legacy-Keras
switch (tf-keras as `keras`) the same code runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from sagetrain.report.keras_2_code import KERAS_2_ERRORS

pytestmark = pytest.mark.timeout(300)

# One small piece of Keras 2 code per entry, keyed by the entry's spelling. Each runs with `keras`,
# `tf`, `np`, a fitted `model`, data `x`, `y` and a fresh folder `tmp` in scope.
SPELLINGS = {
    "model.fit_generator / evaluate_generator / predict_generator": """
        def batches():
            while True:
                yield x[:8], y[:8]
        model.fit_generator(batches(), steps_per_epoch=2, epochs=1, verbose=0)
    """,
    "fit / evaluate / predict with workers=, use_multiprocessing=, max_queue_size=": """
        model.fit(x, y, epochs=1, verbose=0, workers=2, use_multiprocessing=False)
    """,
    "keras.optimizers.legacy": """
        keras.optimizers.legacy.SGD(0.1)
    """,
    "keras.preprocessing.image.ImageDataGenerator, keras.preprocessing.text": """
        from keras.preprocessing.image import ImageDataGenerator
        ImageDataGenerator(rotation_range=10)
    """,
    "keras.layers.experimental, keras.callbacks.experimental, keras.utils.experimental (DatasetCreator)": """
        keras.layers.experimental.preprocessing.Normalization()
    """,
    "keras.backend.get_value / set_value / set_learning_phase and other backend functions": """
        keras.backend.set_value(model.optimizer.learning_rate, 0.05)
    """,
    "optimizer.lr (read, or given to K.set_value)": """
        assert abs(float(model.optimizer.lr) - 0.01) < 1e-6
    """,
    "LossScaleOptimizer.get_scaled_loss / get_unscaled_gradients": """
        scaled = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        scaled.get_scaled_loss(tf.constant(1.0))
    """,
    "model.save_weights(prefix) as a TensorFlow checkpoint": """
        model.save_weights(tmp + "/ckpt")
    """,
    "model.load_weights of a TensorFlow checkpoint, keras.models.load_model of a SavedModel folder": """
        model.save(tmp + "/saved")  # a SavedModel, on both (Keras 3: this image's patch)
        keras.models.load_model(tmp + "/saved")
    """,
    "ModelCheckpoint to a path without .keras (or .weights.h5 with save_weights_only=True)": """
        keras.callbacks.ModelCheckpoint(tmp + "/ckpt-{epoch}")
    """,
    "model.save(..., save_format='h5' or 'keras') to a path without that extension": """
        model.save(tmp + "/model", save_format="h5")
    """,
    "model.save(..., options= / signatures= / save_traces=)": """
        model.save(tmp + "/saved", options=tf.saved_model.SaveOptions())
    """,
    "model.save_spec()": """
        model.save_spec()
    """,
    "Layer.add_metric": """
        class Endpoint(keras.layers.Layer):
            def call(self, inputs):
                self.add_metric(tf.reduce_mean(inputs), name="mean_input")
                return inputs
        inputs = keras.Input((3,))
        keras.Model(inputs, Endpoint()(inputs))
    """,
}

RUNNER = """
import json, sys, tempfile, traceback, textwrap
import numpy as np
import tensorflow as tf
import keras

x = np.random.RandomState(0).uniform(-1, 1, (32, 3)).astype("float32")
y = x.sum(axis=1, keepdims=True)
results = {}
for spelling, code in json.loads(sys.argv[1]).items():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.fit(x, y, epochs=1, verbose=0)
    scope = {"keras": keras, "tf": tf, "np": np, "x": x, "y": y, "model": model, "tmp": tempfile.mkdtemp()}
    try:
        exec(textwrap.dedent(code), scope)
        results[spelling] = None
    except Exception as error:
        results[spelling] = "".join(traceback.format_exception(error))
print(json.dumps({"keras": keras.__version__, "results": results}))
"""


def run_spellings(switch: bool) -> dict:
    env = {name: value for name, value in os.environ.items() if "KERAS" not in name}
    if switch:
        env["SAGETRAIN_LEGACY_KERAS"] = "1"
    completed = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(SPELLINGS)],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def on_keras_3() -> dict:
    return run_spellings(switch=False)


@pytest.fixture(scope="module")
def under_the_switch() -> dict:
    return run_spellings(switch=True)


def test_every_recognised_spelling_has_its_code_here():
    assert sorted(SPELLINGS) == sorted(entry.spelling for entry in KERAS_2_ERRORS)


@pytest.mark.parametrize("entry", KERAS_2_ERRORS, ids=lambda entry: entry.spelling)
def test_keras_3_fails_on_it_with_the_error_its_entry_recognises(on_keras_3, entry):
    assert on_keras_3["keras"].startswith("3."), on_keras_3["keras"]
    said = on_keras_3["results"][entry.spelling]
    assert said is not None, f"{entry.spelling} ran on Keras 3"
    assert re.search(entry.pattern, said), said[-2000:]


@pytest.mark.parametrize("entry", KERAS_2_ERRORS, ids=lambda entry: entry.spelling)
def test_the_legacy_keras_switch_runs_it(under_the_switch, entry):
    assert under_the_switch["keras"].startswith("2."), under_the_switch["keras"]
    assert under_the_switch["results"][entry.spelling] is None, under_the_switch["results"][entry.spelling]
