# ruff: noqa: PTH103, PTH118
"""MultiWorkerMirroredStrategy with tf-keras `fit`, as TensorFlow's multi-worker tutorial does it.
Run with TF_USE_LEGACY_KERAS=1 so `tf.keras` is tf-keras. The last lines record each worker's weights."""

import json
import os

import numpy as np
import tensorflow as tf

if not tf.keras.__name__.startswith("tf_keras"):
    raise SystemExit(f"this script needs tf-keras (TF_USE_LEGACY_KERAS=1); tf.keras is {tf.keras.__name__}")

tf_config = json.loads(os.environ["TF_CONFIG"])
worker_index = tf_config["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
workers = strategy.num_replicas_in_sync

data = np.loadtxt(
    os.path.join(os.environ["SM_CHANNEL_TRAIN"], "train.csv"), delimiter=",", skiprows=1, dtype="float32"
)
global_batch = 8 * workers
dataset = tf.data.Dataset.from_tensor_slices((data[:, :4], data[:, 4:])).batch(global_batch).repeat()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = dataset.with_options(options)

with strategy.scope():
    tf.random.set_seed(7 + worker_index)  # variables created in scope are synced from worker 0
    model = tf.keras.Sequential(
        [tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="tanh"), tf.keras.layers.Dense(1)]
    )
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
model.fit(dataset, epochs=2, steps_per_epoch=len(data) // global_batch, verbose=2)

# Every worker saves (saving may run collectives); only the chief's copy is the model.
model_dir = os.environ["SM_MODEL_DIR"] if worker_index == 0 else f"/tmp/worker-{worker_index}"
os.makedirs(model_dir, exist_ok=True)
model.save(os.path.join(model_dir, "model.keras"))

output = os.environ["SM_OUTPUT_DATA_DIR"]
os.makedirs(output, exist_ok=True)
np.savez(os.path.join(output, f"worker-{worker_index}-weights.npz"), *model.get_weights())
