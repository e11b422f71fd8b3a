"""A Keras model module: classify scikit-learn's 8×8 digits from the TFRecord files in data/.

The image's managed trainer calls ``build_model(hp)`` and ``parse_record(serialized, hp)``; it shards,
shuffles, batches, distributes, checkpoints and exports. No distribution code here.
"""

from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf


def build_model(hp: Mapping[str, Any]) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Rescaling(1.0 / 16),
            keras.layers.Conv2D(hp.get("filters", 16), 3, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(hp.get("units", 64), activation="relu"),
            keras.layers.Dropout(hp.get("dropout", 0.1)),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(hp.get("learning_rate", 0.003)),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def parse_record(serialized: tf.Tensor, hp: Mapping[str, Any]) -> tuple[tf.Tensor, tf.Tensor]:
    parsed = tf.io.parse_single_example(
        serialized,
        {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)},
    )
    image = tf.reshape(tf.cast(tf.io.decode_raw(parsed["image"], tf.uint8), tf.float32), (8, 8, 1))
    return image, parsed["label"]
