# ruff: noqa: PTH103, PTH118, PTH123
"""An ordinary Horovod + Keras training script, written the way Horovod's examples are.

The last lines only record, for the tests, each rank's host and final weights in its host's output dir.
"""

import argparse
import json
import os
import socket

import horovod.tensorflow.keras as hvd
import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=8)
parser.add_argument("--learning_rate", type=float, default=0.01)
parser.add_argument("--model_dir", default=os.environ.get("SM_MODEL_DIR"))
args = parser.parse_args()  # strict, as most scripts are: an argument it does not know fails it

hvd.init()

data = np.loadtxt(
    os.path.join(os.environ["SM_CHANNEL_TRAIN"], "train.csv"), delimiter=",", skiprows=1, dtype="float32"
)
features, labels = data[:, :4], data[:, 4:]
steps_per_epoch = len(data) // hvd.size() // args.batch_size
dataset = (
    tf.data.Dataset.from_tensor_slices((features, labels))
    .shard(hvd.size(), hvd.rank())
    .shuffle(64, seed=hvd.rank())
    .batch(args.batch_size)
    .repeat()
)

keras.utils.set_random_seed(1234 + hvd.rank())  # different starting points: the broadcast must fix that
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(args.learning_rate * hvd.size()))
model.compile(optimizer=optimizer, loss="mse")
callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
]
history = model.fit(
    dataset,
    steps_per_epoch=steps_per_epoch,
    epochs=args.epochs,
    callbacks=callbacks,
    verbose=2 if hvd.rank() == 0 else 0,
)
if hvd.rank() == 0:
    os.makedirs(args.model_dir, exist_ok=True)
    model.save(os.path.join(args.model_dir, "model.keras"))

# --- what the tests read ---
output = os.environ["SM_OUTPUT_DATA_DIR"]
os.makedirs(output, exist_ok=True)
np.savez(os.path.join(output, f"rank-{hvd.rank()}-weights.npz"), *model.get_weights())
with open(os.path.join(output, f"identity-rank-{hvd.rank()}.json"), "w") as file:
    json.dump(
        {
            "rank": hvd.rank(),
            "local_rank": hvd.local_rank(),
            "size": hvd.size(),
            "sm_current_host": os.environ.get("SM_CURRENT_HOST"),
            "current_host": os.environ.get("CURRENT_HOST"),
            "training_env_current_host": json.loads(os.environ.get("SM_TRAINING_ENV", "{}")).get(
                "current_host"
            ),
            "hostname": socket.gethostname(),
            "final_loss": history.history["loss"][-1],
        },
        file,
    )
