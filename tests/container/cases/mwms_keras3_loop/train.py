# ruff: noqa: PTH103, PTH118, B905
"""MultiWorkerMirroredStrategy with a Keras 3 model trained by a custom loop (`strategy.run`), the way
that works with Keras 3 (its `fit` does not under this strategy). Records each worker's weights."""

import json
import os

import keras
import numpy as np
import tensorflow as tf

tf_config = json.loads(os.environ["TF_CONFIG"])
worker_index = tf_config["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
workers = strategy.num_replicas_in_sync

data = np.loadtxt(
    os.path.join(os.environ["SM_CHANNEL_TRAIN"], "train.csv"), delimiter=",", skiprows=1, dtype="float32"
)
global_batch = 8 * workers
steps = len(data) // global_batch
dataset = tf.data.Dataset.from_tensor_slices((data[:, :4], data[:, 4:])).batch(global_batch).repeat()
distributed = iter(strategy.experimental_distribute_dataset(dataset))

with strategy.scope():
    keras.utils.set_random_seed(7 + worker_index)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.SGD(0.05)
    optimizer.build(model.trainable_variables)


@tf.function
def train_step(iterator):
    def step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(features, training=True) - labels), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    losses = strategy.run(step, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


for epoch in range(2):
    total = 0.0
    for _ in range(steps):
        total += float(train_step(distributed))
    print(f"epoch={epoch + 1} loss={total / steps:.6f}", flush=True)

output = os.environ["SM_OUTPUT_DATA_DIR"]
os.makedirs(output, exist_ok=True)
np.savez(os.path.join(output, f"worker-{worker_index}-weights.npz"), *[np.asarray(v) for v in model.weights])
if worker_index == 0:
    os.makedirs(os.environ["SM_MODEL_DIR"], exist_ok=True)
    model.save(os.path.join(os.environ["SM_MODEL_DIR"], "model.keras"))
