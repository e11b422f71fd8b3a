"""Epoch scalars as TensorBoard event files, written with TensorFlow's own summary ops.

``tf.summary.scalar`` lives in the tensorboard package, which the image does not carry; the generic
``tf.summary.write`` with the scalars plugin's metadata writes the same events TensorBoard reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import tensorflow as tf
from tensorflow.core.framework import summary_pb2


def _scalar_metadata() -> bytes:
    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    return metadata.SerializeToString()


class EpochScalars:
    def __init__(self, directory: Path) -> None:
        self._writer = tf.summary.create_file_writer(str(directory))
        self._metadata = _scalar_metadata()

    def write(self, epoch: int, metrics: Mapping[str, float]) -> None:
        with self._writer.as_default():
            for name, value in metrics.items():
                tf.summary.write(name, tf.constant(value, tf.float32), step=epoch, metadata=self._metadata)
        self._writer.flush()
