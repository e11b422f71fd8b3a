"""A Keras model module for the trainer's distributed tests.

Feature 0 of every record is its id. The ``RecordIds`` layer strips it and, in training steps only, appends
the step's ids to ``<ids_dir>/ids-rank-<rank>.txt`` (one line per step), so the test sees exactly which
records each rank trained on. With ``sigterm_at_step`` it sends SIGTERM to its own process during that
step (counted per process, on rank ``sigterm_rank``) — a deterministic stand-in for a spot interruption;
``kill_at_step`` sends SIGKILL instead (a host that dies: no checkpoint of its own, no goodbye).
With ``init_seed`` the Dense kernels are initialised from that seed, plus the rank with
``init_seed_by_rank`` (so only the trainer's broadcast makes the ranks start alike); the initial weights
are then saved to ``<ids_dir>/init-rank-<rank>.npz``.
"""

import os
import signal
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf


@keras.saving.register_keras_serializable(package="sagetrain_tests")
class RecordIds(keras.layers.Layer):
    def __init__(self, ids_dir="", sigterm_at_step=0, sigterm_rank=0, kill_at_step=0, **kwargs):
        super().__init__(**kwargs)
        self.ids_dir, self.sigterm_at_step, self.sigterm_rank = ids_dir, sigterm_at_step, sigterm_rank
        self.kill_at_step = kill_at_step
        self._steps = 0

    def call(self, inputs, training=False):
        if training and self.ids_dir:
            tf.py_function(self._log, [inputs[:, 0]], [])
        return inputs[:, 1:]

    def _log(self, ids):
        self._steps += 1
        rank = int(os.environ.get("SAGETRAIN_RANK", "0"))
        with (Path(self.ids_dir) / f"ids-rank-{rank}.txt").open("a") as log:
            log.write(" ".join(str(int(value)) for value in np.asarray(ids)) + "\n")
        if self._steps == self.sigterm_at_step and rank == self.sigterm_rank:
            os.kill(os.getpid(), signal.SIGTERM)
        if self._steps == self.kill_at_step and rank == self.sigterm_rank:
            os.kill(os.getpid(), signal.SIGKILL)

    def get_config(self):
        return {
            **super().get_config(),
            "ids_dir": "",
            "sigterm_at_step": 0,
            "sigterm_rank": 0,
            "kill_at_step": 0,
        }


def kernel_initializers(hp, rank):
    seed = hp.get("init_seed")
    if seed is None:
        return "glorot_uniform", "glorot_uniform"
    seed += 10 * rank if hp.get("init_seed_by_rank", False) else 0
    return keras.initializers.GlorotUniform(seed), keras.initializers.GlorotUniform(seed + 1)


def build_model(hp):
    features = hp.get("features", 3)
    rank = int(os.environ.get("SAGETRAIN_RANK", "0"))
    hidden_init, output_init = kernel_initializers(hp, rank)
    inputs = keras.Input((features + 1,))
    hidden = RecordIds(
        hp.get("ids_dir", ""),
        hp.get("sigterm_at_step", 0),
        hp.get("sigterm_rank", 0),
        hp.get("kill_at_step", 0),
    )(inputs)
    hidden = keras.layers.Dense(8, activation="tanh", kernel_initializer=hidden_init)(hidden)
    outputs = keras.layers.Dense(1, kernel_initializer=output_init)(hidden)
    model = keras.Model(inputs, outputs)
    if hp.get("init_seed") is not None and hp.get("ids_dir"):
        np.savez(Path(hp["ids_dir"]) / f"init-rank-{rank}.npz", *model.get_weights())
    if hp.get("compile_in_module", True):
        model.compile(
            optimizer=keras.optimizers.Adam(hp.get("learning_rate", 0.01)), loss="mse", metrics=["mae"]
        )
    return model


def parse_record(serialized, hp):
    parsed = tf.io.parse_single_example(
        serialized,
        {
            "x": tf.io.FixedLenFeature([hp.get("features", 3) + 1], tf.float32),
            "y": tf.io.FixedLenFeature([], tf.float32),
        },
    )
    return parsed["x"], parsed["y"]
