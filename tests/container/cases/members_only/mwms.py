# ruff: noqa: PTH118, B905
"""MultiWorkerMirroredStrategy with a Keras 3 model and a `strategy.run` loop, paused after its first
step (the workers' gRPC servers have run collectives together) while the test probes the ports."""

import json
import os

import keras
import numpy as np
import tensorflow as tf
from pause import pause_here

worker = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch = 8 * strategy.num_replicas_in_sync
data = np.random.default_rng(5).normal(size=(96, 5)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((data[:, :4], data[:, 4:])).batch(global_batch).repeat()
batches = iter(strategy.experimental_distribute_dataset(dataset))
with strategy.scope():
    keras.utils.set_random_seed(7)
    layers = [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    model = keras.Sequential(layers)
    optimizer = keras.optimizers.SGD(0.05)
    optimizer.build(model.trainable_variables)


@tf.function
def train_step(iterator):
    def step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(features, training=True) - labels), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(next(iterator),)), axis=None)


print(f"worker {worker} first loss {float(train_step(batches)):.6f}", flush=True)
pause_here(f"worker-{worker}")
for _ in range(10):
    train_step(batches)
output = os.environ["SM_OUTPUT_DATA_DIR"]
np.savez(os.path.join(output, f"worker-{worker}-weights.npz"), *[np.asarray(v) for v in model.weights])
