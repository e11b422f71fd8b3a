"""Writes the channels figures 13, 14, 18 and 19 read: ``python make_channel_data.py OUT SPEC_JSON``.

SPEC: {"small": {"counts": [...], "records_per_file": n, "image_shape": [h, w, d]}, "large": {...}}.
For each kind, ``OUT/<kind>/<count>/part-NNNNNN.tfrecord``: the largest count is written, the smaller
ones are hard links to its first files (same bytes, no second copy). Images are noise; only reading is
measured. Writes ``OUT/complete`` last, so a half-written cache is never taken for a whole one.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf


def example(rng: np.random.Generator, shape: list[int]) -> bytes:
    image = rng.integers(0, 256, size=shape, dtype=np.uint8)
    label = int(rng.integers(0, 10))
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
        )
    ).SerializeToString()


def write_kind(out: Path, counts: list[int], records_per_file: int, shape: list[int]) -> None:
    rng = np.random.default_rng(0)
    # One pool of distinct records, reused across files: writing, not generating, is the cost that
    # matters for 100,000 files.
    pool = [example(rng, shape) for _ in range(max(64, records_per_file))]
    full = out / str(max(counts))
    full.mkdir(parents=True, exist_ok=True)
    for index in range(max(counts)):
        with tf.io.TFRecordWriter(str(full / f"part-{index:06d}.tfrecord")) as writer:
            for record in range(records_per_file):
                writer.write(pool[(index + record) % len(pool)])
    for count in counts:
        subset = out / str(count)
        if subset == full:
            continue
        subset.mkdir(parents=True, exist_ok=True)
        for index in range(count):
            name = f"part-{index:06d}.tfrecord"
            os.link(full / name, subset / name)


out, spec = Path(sys.argv[1]), json.loads(sys.argv[2])
for kind, kind_spec in spec.items():
    write_kind(out / kind, kind_spec["counts"], kind_spec["records_per_file"], kind_spec["image_shape"])
    print(f"BENCH data kind={kind} counts={kind_spec['counts']}", flush=True)
(out / "complete").write_text(json.dumps(spec, sort_keys=True))
