"""Figures 13, 14 and 19: a Keras model module (the managed trainer's contract) over TFRecord images of the
shape the hyperparameter ``image_shape`` gives, with a probe that reports when the first batch reaches
the model.

The model is deliberately tiny (average pooling and one dense layer): the figures measure the channel's
input path, so a step must cost next to nothing. ``build_model`` runs just before the trainer lists its
channels; the probe prints on its first eager call, which is the first real batch (the trainer feeds it
through the model before its first collective). So the memory growth between the two is what listing,
sharding and counting the channel cost, and the time is start to first batch.

Figure 19 trains this model on figure 14's channel both through the trainer and through the plain
Horovod script (plain_horovod_script.py builds it and parses with it); it reads neither the probe's lines
nor the memory mark.
"""

import os
from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf
from channel_records import first_batch_line, image_shape, mark_before_listing, parse_image_record
from probe import probe_label

CLASSES = 10


class FirstBatchProbe(keras.layers.Layer):
    """Passes its input through; prints ``BENCH first_batch`` when it first sees real data (eagerly)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reported = False

    def call(self, inputs: Any) -> Any:
        # Symbolic calls (building the model, tracing the step) run with eager execution off or with
        # KerasTensors; only a real batch is both eager and a tf.Tensor.
        if not self.reported and tf.executing_eagerly() and isinstance(inputs, tf.Tensor):
            self.reported = True
            print(first_batch_line(probe_label(os.environ)), flush=True)
        return inputs


def build_model(hp: Mapping[str, Any]) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input(image_shape(hp)),
            FirstBatchProbe(),
            keras.layers.Rescaling(1.0 / 255),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    mark_before_listing()  # the trainer lists the channels next
    return model


def parse_record(serialized: tf.Tensor, hp: Mapping[str, Any]) -> tuple[tf.Tensor, tf.Tensor]:
    return parse_image_record(serialized, hp)
