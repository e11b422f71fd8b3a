"""Writes the TFRecord files figures 5 and 6 read: ``python make_data.py OUT_DIR RECORDS FILES``.
Images are noise around a per-class pattern, so the model has something to learn."""

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

out, records, files = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(0)
patterns = rng.integers(0, 256, size=(10, 28, 28), dtype=np.int64)
for index in range(files):
    count = records // files + (1 if index < records % files else 0)
    with tf.io.TFRecordWriter(str(out / f"part-{index:02d}.tfrecord")) as writer:
        for _ in range(count):
            label = int(rng.integers(0, 10))
            noise = rng.integers(-64, 65, size=(28, 28))
            image = np.clip(patterns[label] + noise, 0, 255).astype(np.uint8)
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                    }
                )
            )
            writer.write(example.SerializeToString())
print(f"BENCH data records={records} files={files}", flush=True)
