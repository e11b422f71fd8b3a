# ruff: noqa: PTH118
"""The common Keras 3 recipe under MultiWorkerMirroredStrategy: `import keras`, the strategy, a model
built and compiled in `strategy.scope()`, `model.fit` on a tf.data dataset with `epochs` and
`steps_per_epoch`, with a TensorBoard callback. (Upstream Keras 3 fails here before the first step.)"""

import json
import os

import keras
import numpy as np
import tensorflow as tf

workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()

data = np.loadtxt(
    os.path.join(os.environ["SM_CHANNEL_TRAIN"], "train.csv"), delimiter=",", skiprows=1, dtype="float32"
)
global_batch = 16 * workers
dataset = tf.data.Dataset.from_tensor_slices((data[:, :4], data[:, 4:])).repeat().batch(global_batch)

with strategy.scope():
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])

# TensorBoard logs in SageMaker's TensorBoard output folder: every worker runs the callback, the chief
# writes (as tf-keras documented it for multi-worker training).
tensorboard = keras.callbacks.TensorBoard(
    log_dir=os.path.join(os.environ.get("SM_OUTPUT_DIR", "/opt/ml/output"), "tensorboard"), histogram_freq=1
)
model.fit(dataset, epochs=3, steps_per_epoch=10, verbose=2, callbacks=[tensorboard])
