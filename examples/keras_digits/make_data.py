"""Write scikit-learn's bundled digits (1,797 8×8 images, no download) as TFRecord channel files.

    python make_data.py [--out data] [--train-files 4] [--seed 0]

Each record is a ``tf.train.Example`` with ``image`` (64 raw bytes, pixel values 0..16) and ``label``
(int64, 0..9). The split is 70 % train (in several files, so ranks can shard by file), 15 % validation,
15 % test. The generated files are committed, so the example runs in an image without scikit-learn.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits


def example(image: np.ndarray, label: int) -> bytes:
    features = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.astype(np.uint8).tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_channel(directory: Path, images: np.ndarray, labels: np.ndarray, files: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.tfrecord"):
        stale.unlink()
    for index, rows in enumerate(np.array_split(np.arange(len(images)), files)):
        with tf.io.TFRecordWriter(str(directory / f"digits-{index:02d}.tfrecord")) as writer:
            for row in rows:
                writer.write(example(images[row], labels[row]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    parser.add_argument("--train-files", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()

    digits = load_digits()
    order = np.random.default_rng(arguments.seed).permutation(len(digits.target))
    images, labels = digits.data[order], digits.target[order]
    train_end, validation_end = int(0.7 * len(order)), int(0.85 * len(order))
    write_channel(arguments.out / "train", images[:train_end], labels[:train_end], arguments.train_files)
    write_channel(
        arguments.out / "validation", images[train_end:validation_end], labels[train_end:validation_end], 1
    )
    write_channel(arguments.out / "test", images[validation_end:], labels[validation_end:], 1)
    print(
        f"wrote {train_end} train, {validation_end - train_end} validation, "
        f"{len(order) - validation_end} test "
        f"records under {arguments.out}"
    )


if __name__ == "__main__":
    main()
