"""Epoch scalars as TensorBoard event files, written with ``tf.summary.scalar`` (TensorBoard's own
writer, installed in the image)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import tensorflow as tf


class EpochScalars:
    def __init__(self, directory: Path) -> None:
        self._writer = tf.summary.create_file_writer(str(directory))

    def write(self, epoch: int, metrics: Mapping[str, float]) -> None:
        with self._writer.as_default():
            for name, value in metrics.items():
                tf.summary.scalar(name, value, step=epoch)
        self._writer.flush()
