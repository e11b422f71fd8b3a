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
from sagetrain.report.keras_2_code import KERAS_2_ERRORS, shows_keras_2_code

pytestmark = pytest.mark.timeout(300)

# Keras 2 code for every entry, keyed by the entry's spelling: each piece a name and its code (one per
# spelling the entry names). Each runs with `keras`, `tf`, `np`, a fitted `model`, data `x`, `y` and a
# fresh folder `tmp` in scope.
SPELLINGS: dict[str, dict[str, str]] = {
    "model.fit_generator / evaluate_generator / predict_generator": {
        "fit_generator": """
            def batches():
                while True:
                    yield x[:8], y[:8]
            model.fit_generator(batches(), steps_per_epoch=2, epochs=1, verbose=0)
        """,
        "predict_generator": """
            model.predict_generator((x[:8] for _ in range(2)), steps=2, verbose=0)
        """,
    },
    "fit / evaluate / predict with workers=, use_multiprocessing=, max_queue_size=": {
        "fit": "model.fit(x, y, epochs=1, verbose=0, workers=2, use_multiprocessing=False)",
        "evaluate": "model.evaluate(x, y, verbose=0, workers=2)",
        "predict": "model.predict(x, verbose=0, max_queue_size=4)",
    },
    "keras.optimizers.legacy": {"legacy optimizer": "keras.optimizers.legacy.SGD(0.1)"},
    "keras.preprocessing.image.ImageDataGenerator, keras.preprocessing.text": {
        "ImageDataGenerator": """
            from keras.preprocessing.image import ImageDataGenerator
            ImageDataGenerator(rotation_range=10)
        """,
        "Tokenizer": """
            from keras.preprocessing.text import Tokenizer
            Tokenizer(num_words=10).fit_on_texts(["a b", "b c"])
        """,
    },
    "keras.layers.experimental, keras.callbacks.experimental, keras.utils.experimental (DatasetCreator)": {
        "layers": "keras.layers.experimental.preprocessing.Normalization()",
        "callbacks": "keras.callbacks.experimental.BackupAndRestore(tmp)",
        "utils": "keras.utils.experimental.DatasetCreator(lambda context: None)",
    },
    "keras.backend.get_value / set_value / set_learning_phase and other backend functions": {
        "set_value": "keras.backend.set_value(model.optimizer.learning_rate, 0.05)",
        "set_learning_phase": "keras.backend.set_learning_phase(0)",
    },
    "optimizer.lr (read, or given to K.set_value)": {
        "lr": "assert abs(float(model.optimizer.lr) - 0.01) < 1e-6",
    },
    "tf.keras.backend.set_value(optimizer.learning_rate, …) on a Keras 3 variable": {
        "tf.keras": "tf.keras.backend.set_value(model.optimizer.learning_rate, 0.05)",
    },
    "LossScaleOptimizer.get_scaled_loss / get_unscaled_gradients": {
        "get_scaled_loss": """
            scaled = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            scaled.get_scaled_loss(tf.constant(1.0))
        """,
        "get_unscaled_gradients": """
            scaled = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            scaled.get_unscaled_gradients([tf.constant(1.0)])
        """,
    },
    "model.save_weights(prefix) as a TensorFlow checkpoint": {
        "save_weights": 'model.save_weights(tmp + "/ckpt")'
    },
    "model.load_weights of a TensorFlow checkpoint, keras.models.load_model of a SavedModel folder": {
        "load_model": """
            model.save(tmp + "/saved")  # a SavedModel, on both (Keras 3: this image's patch)
            keras.models.load_model(tmp + "/saved")
        """,
        "load_weights": """
            prefix = tf.train.Checkpoint(root=model).write(tmp + "/ckpt")  # as Keras 2's save_weights
            model.load_weights(prefix)
        """,
    },
    "ModelCheckpoint to a path without .keras (or .weights.h5 with save_weights_only=True)": {
        "model": 'keras.callbacks.ModelCheckpoint(tmp + "/ckpt-{epoch}")',
        "weights": 'keras.callbacks.ModelCheckpoint(tmp + "/ckpt-{epoch}", save_weights_only=True)',
    },
    "model.save(..., save_format='h5' or 'keras') to a path without that extension": {
        "h5": 'model.save(tmp + "/model", save_format="h5")',
    },
    "model.save(..., options= / signatures= / save_traces=)": {
        "options": 'model.save(tmp + "/saved", options=tf.saved_model.SaveOptions())',
    },
    "model.save_spec()": {"save_spec": "model.save_spec()"},
    "Layer.add_metric": {
        "add_metric": """
            class Endpoint(keras.layers.Layer):
                def call(self, inputs):
                    self.add_metric(tf.reduce_mean(inputs), name="mean_input")
                    return inputs
            inputs = keras.Input((3,))
            keras.Model(inputs, Endpoint()(inputs))
        """,
    },
    "fit under ParameterServerStrategy with a dataset (tf-keras's fit takes it; Keras 3's does not)": {
        "fit": """
            import socket
            def free_port():
                with socket.socket() as s:
                    s.bind(("localhost", 0))
                    return s.getsockname()[1]
            jobs = ("chief", "worker", "ps")
            spec = tf.train.ClusterSpec({job: [f"localhost:{free_port()}"] for job in jobs})
            for job in ("worker", "ps"):
                tf.distribute.Server(spec, job_name=job, task_index=0, protocol="grpc", start=True)
            resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
                spec, task_type="chief", task_id=0, rpc_layer="grpc")
            strategy = tf.distribute.ParameterServerStrategy(resolver)
            with strategy.scope():
                served = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
                served.compile(keras.optimizers.SGD(0.1), "mse")
            served.fit(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8), epochs=1,
                       steps_per_epoch=2, verbose=0)
        """,
    },
}

RUNNER = """
import json, sys, tempfile, traceback, textwrap
import numpy as np
import tensorflow as tf
import keras

x = np.random.RandomState(0).uniform(-1, 1, (32, 3)).astype("float32")
y = x.sum(axis=1, keepdims=True)
results = {}
for name, code in json.loads(sys.argv[1]).items():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.fit(x, y, epochs=1, verbose=0)
    scope = {"keras": keras, "tf": tf, "np": np, "x": x, "y": y, "model": model, "tmp": tempfile.mkdtemp()}
    try:
        exec(textwrap.dedent(code), scope)
        results[name] = None
    except Exception as error:
        results[name] = "".join(traceback.format_exception(error))
print(json.dumps({"keras": keras.__version__, "results": results}))
"""


def run_spellings(switch: bool) -> dict:
    env = {name: value for name, value in os.environ.items() if "KERAS" not in name}
    if switch:
        env["SAGETRAIN_LEGACY_KERAS"] = "1"
    completed = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps({repr(key): code for key, code in PIECES})],
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


# (entry spelling, piece name) → code, one test each.
PIECES = [((spelling, name), code) for spelling, pieces in SPELLINGS.items() for name, code in pieces.items()]
ENTRIES = {entry.spelling: entry for entry in KERAS_2_ERRORS}


def test_every_recognised_spelling_has_its_code_here():
    assert sorted(SPELLINGS) == sorted(ENTRIES)


@pytest.mark.parametrize("piece", [key for key, _ in PIECES], ids=lambda key: f"{key[0][:40]}: {key[1]}")
def test_keras_3_fails_on_it_with_the_error_its_entry_recognises(on_keras_3, piece):
    assert on_keras_3["keras"].startswith("3."), on_keras_3["keras"]
    said = on_keras_3["results"][repr(piece)]
    assert said is not None, f"{piece} ran on Keras 3"
    assert re.search(ENTRIES[piece[0]].pattern, said), said[-2000:]
    assert shows_keras_2_code(said.splitlines()), said[-2000:]


@pytest.mark.parametrize("piece", [key for key, _ in PIECES], ids=lambda key: f"{key[0][:40]}: {key[1]}")
def test_the_legacy_keras_switch_runs_it(under_the_switch, piece):
    assert under_the_switch["keras"].startswith("2."), under_the_switch["keras"]
    assert under_the_switch["results"][repr(piece)] is None, under_the_switch["results"][repr(piece)]
