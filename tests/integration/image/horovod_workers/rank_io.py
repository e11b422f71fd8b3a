"""What a worker rank uses to report: the Keras flavour in effect and a writer for its outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import tensorflow as tf
from sagetrain.legacy_keras import TF_USE_LEGACY_KERAS_VAR


def keras_flavour() -> str:
    """'tf_keras' or 'keras3', from the classes tf.keras really gives (not from the environment)."""
    module = type(tf.keras.layers.Dense(1)).__module__
    return "tf_keras" if module.startswith("tf_keras") else "keras3"


class RankWriter:
    """Collects named arrays and JSON values; `close` writes rank<r>.npz and rank<r>.json."""

    def __init__(self, out_dir: str, rank: int, size: int) -> None:
        self._out_dir = Path(out_dir)
        self._rank = rank
        self._arrays: dict[str, np.ndarray] = {}
        self.record: dict = {
            "rank": rank,
            "size": size,
            "flavour": keras_flavour(),
            "tf_use_legacy_keras": os.environ.get(TF_USE_LEGACY_KERAS_VAR, ""),
        }

    def arrays(self, prefix: str, values) -> None:
        for index, value in enumerate(values):
            self._arrays[f"{prefix}/{index}"] = to_numpy(value)

    def scoped(self, scope: str) -> ScopedWriter:
        return ScopedWriter(self, scope)

    def close(self) -> None:
        np.savez(self._out_dir / f"rank{self._rank}.npz", **self._arrays)
        (self._out_dir / f"rank{self._rank}.json").write_text(
            json.dumps(self.record, indent=1, default=float)
        )


class ScopedWriter:
    """Writes arrays as `<scope>/<prefix>/<i>` and JSON values under `record[<scope>]`."""

    def __init__(self, writer: RankWriter, scope: str) -> None:
        self._writer = writer
        self._scope = scope
        self.record: dict = writer.record.setdefault(scope, {})

    def arrays(self, prefix: str, values) -> None:
        self._writer.arrays(f"{self._scope}/{prefix}", values)


def to_numpy(value) -> np.ndarray:
    if isinstance(value, tf.IndexedSlices):
        value = tf.convert_to_tensor(value)
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    return np.asarray(value)
