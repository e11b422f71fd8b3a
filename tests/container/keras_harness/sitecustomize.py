"""Test harness for running public training scripts unmodified (loaded through PYTHONPATH; not in the
image). Active only with SAGETRAIN_HARNESS_OUT set, it:

- seeds Keras (weights) and gives `tf.data.Dataset.shuffle` a fixed seed when the script gives none,
  so every tf.distribute worker, and the single-process reference, shuffle alike (the scripts seed
  nothing); each MPI rank gets a seed of its own;
- answers Keras' MNIST download (`mnist.load_data()` fetches a file and checks its hash) with the
  MNIST-shaped file named by SAGETRAIN_HARNESS_MNIST: Keras' own loading code runs on it, nothing is
  downloaded;
- with SAGETRAIN_HARNESS_MAX_TAKE=N, caps `Dataset.take(count)` at N (a loop over `take(10000 // size)`
  that would run for minutes; Keras' KERAS_MAX_EPOCHS / KERAS_MAX_STEPS_PER_EPOCH do the same for
  `fit`);
- with SAGETRAIN_HARNESS_REFERENCE=1, makes `tf.distribute.MultiWorkerMirroredStrategy()` that
  strategy on a cluster of one worker: the script then trains as one process with one replica on
  its global batch, the reference;
- at exit writes the trainable weights of the last Keras model the script built to
  `$SAGETRAIN_HARNESS_OUT/<worker>-weights.npz` (worker-<TF_CONFIG index>, rank-<MPI rank> or
  reference), and its non-trainable ones (batch-norm statistics) to `<worker>-non-trainable.npz`;
- with SAGETRAIN_HARNESS_PROBE naming a .npy file of inputs, also what that model predicts for them,
  to `<worker>-predictions.npy` (a direct call, not `predict`: at exit no other worker joins a
  distributed step).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

from harness_names import MAX_TAKE_VAR, MNIST_VAR, OUT_VAR, PROBE_VAR, REFERENCE_VAR
from sagetrain.contracts import MPI_RANK_VAR
from sagetrain.plan.tf_config import TF_CONFIG_VAR

SEED = 1234


def _worker_name() -> str:
    if os.environ.get(REFERENCE_VAR) == "1":
        return "reference"
    if MPI_RANK_VAR in os.environ:
        return f"rank-{os.environ[MPI_RANK_VAR]}"
    task = json.loads(os.environ.get(TF_CONFIG_VAR, "{}")).get("task", {})
    return f"worker-{task.get('index', 0)}"


def _seed_shuffles(tf, keras) -> None:
    # MPI ranks get their own seeds (other initial weights, other batches), so identical weights at
    # the end show Horovod's broadcast and averaging; tf.distribute workers share one, because
    # sharding a dataset needs every worker to shuffle it alike.
    seed = SEED + int(os.environ.get(MPI_RANK_VAR, "0"))
    keras.utils.set_random_seed(seed)
    shuffle = tf.data.Dataset.shuffle
    own_seed = seed

    def seeded_shuffle(self, buffer_size, seed=None, *args, **kwargs):
        return shuffle(self, buffer_size, own_seed if seed is None else seed, *args, **kwargs)

    tf.data.Dataset.shuffle = seeded_shuffle


def _cap_takes(tf, max_take: int) -> None:
    take = tf.data.Dataset.take

    def shorter_take(self, count, *args, **kwargs):
        return take(self, min(int(count), max_take), *args, **kwargs)

    tf.data.Dataset.take = shorter_take


def _one_process_strategy(tf) -> None:
    multi_worker = tf.distribute.MultiWorkerMirroredStrategy

    class OneProcess:
        """The strategy on a cluster of this process alone: one replica, the script's global
        batch (the script still reads TF_CONFIG's worker count for it). A class, so Keras'
        isinstance checks still work."""

        def __new__(cls, *args, **kwargs):
            alone = tf.distribute.cluster_resolver.SimpleClusterResolver(
                tf.train.ClusterSpec({"worker": ["localhost:2222"]}), task_type="worker", task_id=0
            )
            return multi_worker(cluster_resolver=alone)

    tf.distribute.MultiWorkerMirroredStrategy = OneProcess


def _dump_weights_at_exit(out_dir: str) -> None:
    import numpy as np
    from keras.src.models import model as model_module

    models: list = []
    model_init = model_module.Model.__init__

    def recording_init(self, *args, **kwargs):
        model_init(self, *args, **kwargs)
        models.append(self)

    model_module.Model.__init__ = recording_init

    def dump() -> None:
        built = [model for model in models if model.weights]
        if built:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            for kind, variables in (
                ("weights", built[-1].trainable_weights),
                ("non-trainable", built[-1].non_trainable_weights),
            ):
                values = [np.asarray(variable.numpy()) for variable in variables]
                np.savez(Path(out_dir) / f"{_worker_name()}-{kind}.npz", *values)
            probe = os.environ.get(PROBE_VAR)
            if probe:
                predictions = np.asarray(built[-1](np.load(probe), training=False))
                np.save(Path(out_dir) / f"{_worker_name()}-predictions.npy", predictions)

    atexit.register(dump)


def _install(out_dir: str) -> None:
    import keras
    import tensorflow as tf
    from keras.src.datasets import mnist

    _seed_shuffles(tf, keras)
    max_take = int(os.environ.get(MAX_TAKE_VAR, "0"))
    if max_take:
        _cap_takes(tf, max_take)
    mnist_file = os.environ.get(MNIST_VAR)
    if mnist_file:
        mnist.get_file = lambda fname=None, origin=None, **kwargs: mnist_file
    if os.environ.get(REFERENCE_VAR) == "1":
        _one_process_strategy(tf)
    _dump_weights_at_exit(out_dir)


def _is_the_images_own_process() -> bool:
    """The image's entry and launchers (``python -m sagetrain``, ``-m sagetrain.launch.…``) run no user
    code: the harness stays out of them, as a user's job has nothing there, and they import no TensorFlow.
    (The managed trainer, ``-m sagetrain.trainer``, runs the user's model: the harness goes in.)"""
    argv = getattr(sys, "orig_argv", [])
    module = argv[2] if len(argv) > 2 and argv[1] == "-m" else ""
    return module == "sagetrain" or module.startswith("sagetrain.launch.")


if os.environ.get(OUT_VAR) and not _is_the_images_own_process():
    _install(os.environ[OUT_VAR])
