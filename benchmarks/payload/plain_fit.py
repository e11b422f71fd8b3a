"""Figure 5, the baseline: what a user writes without the managed trainer — the same model module, a
sequential TFRecord pipeline (same parser, same shuffle buffer and batch size) and plain ``model.fit``.
Prints ``epoch=N`` at the end of every epoch, as the managed trainer does; the harness times those lines."""

import json
import os
from pathlib import Path

import keras
import tensorflow as tf
from model_module import build_model, parse_record

hp = json.loads(os.environ["SM_HPS"])
files = sorted(str(path) for path in Path(os.environ["SM_CHANNEL_TRAIN"]).glob("*.tfrecord"))
keras.utils.set_random_seed(hp.get("seed", 0))
dataset = (
    tf.data.TFRecordDataset(files)
    .map(lambda record: parse_record(record, hp), num_parallel_calls=tf.data.AUTOTUNE)
    .shuffle(hp.get("shuffle_buffer", 10_000), seed=hp.get("seed", 0))
    .batch(hp["batch_size"])
    .prefetch(tf.data.AUTOTUNE)
)


class EpochLine(keras.callbacks.Callback):
    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        print(f"epoch={epoch + 1} loss={(logs or {})['loss']:.4f}", flush=True)


model = build_model(hp)
model.fit(dataset, epochs=hp["epochs"], verbose=0, callbacks=[EpochLine()])
