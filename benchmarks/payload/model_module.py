"""Figures 5 and 6: a Keras model module (the managed trainer's contract) over 28×28 grey images in
TFRecord files. plain_fit.py and channel_read.py import it, so every side uses the same model and parser."""

from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

IMAGE_SHAPE = (28, 28, 1)
CLASSES = 10


def build_model(hp: Mapping[str, Any]) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input(IMAGE_SHAPE),
            keras.layers.Rescaling(1.0 / 255),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(hp.get("learning_rate", 0.001)),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def parse_record(serialized: tf.Tensor, hp: Mapping[str, Any]) -> tuple[tf.Tensor, tf.Tensor]:
    parsed = tf.io.parse_single_example(
        serialized,
        {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)},
    )
    image = tf.reshape(tf.cast(tf.io.decode_raw(parsed["image"], tf.uint8), tf.float32), IMAGE_SHAPE)
    return image, parsed["label"]
