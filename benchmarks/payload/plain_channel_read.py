"""Figures 13 and 14, the baseline: what a user's plain tf.data script does with the same channel in the
same container — list the files, take its share, TFRecordDataset → map(parse) → batch → prefetch.

``python plain_channel_read.py CHANNEL_DIR NAME INDEX COUNT BATCH PASSES IMAGE_SHAPE_JSON``: reader
NAME, number INDEX of COUNT on this host's files, reads every COUNT-th file (sorted). Prints
``BENCH first_batch impl=plain …`` (seconds since this process started, memory) at its first batch,
then, after a first pass that warms up as the trainer's first epoch does and once every reader has
(start_together.py), ``BENCH read impl=plain reader=… records=… seconds=…`` per timed pass.
"""

import json
import sys
import time
from pathlib import Path

import tensorflow as tf
from channel_records import first_batch_line, mark_before_listing, parse_image_record
from start_together import reader_waits

channel, name, index, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
batch, passes, hp = int(sys.argv[5]), int(sys.argv[6]), {"image_shape": json.loads(sys.argv[7])}
mark_before_listing()
files = sorted(str(path) for path in channel.glob("*.tfrecord"))[index::count]
dataset = (
    tf.data.TFRecordDataset(files)
    .map(lambda record: parse_image_record(record, hp), num_parallel_calls=tf.data.AUTOTUNE)
    .batch(batch)
    .prefetch(tf.data.AUTOTUNE)
)


def read_all(report_first: bool) -> int:
    records = 0
    for _images, labels in dataset:
        if report_first and records == 0:
            print(first_batch_line(f"impl=plain reader={name}"), flush=True)
        records += int(labels.shape[0])
    return records


read_all(report_first=True)
reader_waits("plain", name)
for _ in range(passes):
    began = time.perf_counter()
    records = read_all(report_first=False)
    seconds = time.perf_counter() - began
    print(f"BENCH read impl=plain reader={name} records={records} seconds={seconds:.6f}", flush=True)
