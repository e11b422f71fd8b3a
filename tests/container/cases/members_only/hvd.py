# ruff: noqa: PTH118
"""Horovod across hosts, paused mid-job (every rank has exchanged tensors with the others, so Open MPI's
TCP transport is connected) while the test probes the ports; then trained on, its weights recorded."""

import os

import horovod.tensorflow.keras as hvd
import keras
import numpy as np
import tensorflow as tf
from pause import pause_here

hvd.init()
print(f"rank {hvd.rank()} sum {float(hvd.allreduce(tf.constant(1.0), op=hvd.Sum))}", flush=True)
pause_here(f"rank-{hvd.rank()}")

data = np.random.default_rng(5).normal(size=(96, 5)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((data[:, :4], data[:, 4:])).shard(hvd.size(), hvd.rank())
keras.utils.set_random_seed(100 + hvd.rank())  # different starting points: the broadcast must fix that
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
model.fit(
    dataset.batch(8).repeat(),
    steps_per_epoch=6,
    epochs=2,
    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)],
    verbose=0,
)
output = os.environ["SM_OUTPUT_DATA_DIR"]
np.savez(os.path.join(output, f"rank-{hvd.rank()}-weights.npz"), *model.get_weights())
