"""Small channel files for the trainer tests: records whose feature 0 is the record id."""

from itertools import pairwise
from pathlib import Path

import numpy as np


def records(count, features=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count, features)).astype(np.float32)
    y = (x @ np.arange(1, features + 1, dtype=np.float32) + 0.5).astype(np.float32)
    ids = np.arange(count, dtype=np.float32)[:, None]
    return np.concatenate([ids, x], axis=1), y


def split(count, files):
    """Uneven file sizes, so file-level sharding has something to balance."""
    weights = np.arange(1, files + 1)
    bounds = np.concatenate([[0], np.cumsum(weights)]) * count // weights.sum()
    return [(int(start), int(end)) for start, end in pairwise(bounds)]


def write_npz(directory: Path, count, files, features=3):
    directory.mkdir(parents=True, exist_ok=True)
    x, y = records(count, features)
    for index, (start, end) in enumerate(split(count, files)):
        np.savez(directory / f"part-{index:03d}.npz", x=x[start:end], y=y[start:end])


def write_tfrecord(directory: Path, count, files, features=3):
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    x, y = records(count, features)
    for index, (start, end) in enumerate(split(count, files)):
        with tf.io.TFRecordWriter(str(directory / f"part-{index:03d}.tfrecord")) as writer:
            for row in range(start, end):
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[row])),
                            "y": tf.train.Feature(float_list=tf.train.FloatList(value=[y[row]])),
                        }
                    )
                )
                writer.write(example.SerializeToString())


def write_csv(directory: Path, count, files, features=3):
    directory.mkdir(parents=True, exist_ok=True)
    x, y = records(count, features)
    header = ",".join(["id", *[f"f{index}" for index in range(features)], "label"])
    for index, (start, end) in enumerate(split(count, files)):
        rows = [
            ",".join([*(repr(float(value)) for value in x[row]), repr(float(y[row]))])
            for row in range(start, end)
        ]
        (directory / f"part-{index:03d}.csv").write_text("\n".join([header, *rows]) + "\n")
