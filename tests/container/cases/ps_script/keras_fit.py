# ruff: noqa: PTH103, PTH118, PTH123
"""Keras `fit` under ParameterServerStrategy, as TensorFlow's parameter-server tutorial writes it: the
chief builds the model in the strategy's scope and fits a DatasetCreator with a TensorBoard callback;
workers and parameter servers serve until the job ends."""

import json
import os

import numpy as np
import tensorflow as tf
from serving import serve_unless_chief

resolver = serve_unless_chief()
strategy = tf.distribute.ParameterServerStrategy(resolver)
features = np.random.RandomState(0).uniform(-1, 1, (256, 4)).astype("float32")
labels = features.sum(axis=1, keepdims=True)


def dataset_fn(input_context):
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(256).repeat()
    return dataset.batch(16).prefetch(2)


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
    model.compile(tf.keras.optimizers.SGD(0.1), loss="mse", steps_per_execution=5)
# As the tutorial does: TensorBoard logs from the chief (here in SageMaker's TensorBoard output folder).
callbacks = [tf.keras.callbacks.TensorBoard(log_dir=os.path.join(os.environ["SM_OUTPUT_DIR"], "tensorboard"))]
history = model.fit(
    tf.keras.utils.experimental.DatasetCreator(dataset_fn),
    epochs=4,
    steps_per_epoch=20,
    verbose=2,
    callbacks=callbacks,
)
losses = [float(loss) for loss in history.history["loss"]]
print(f"chief done: losses={losses}", flush=True)
os.makedirs(os.environ["SM_MODEL_DIR"], exist_ok=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "result.json"), "w") as file:
    json.dump({"losses": losses}, file)
