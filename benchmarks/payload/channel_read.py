"""Figure 6: records/s of one full epoch through the managed trainer's input path (sagetrain.trainer:
channel → this rank's shard → parse → seeded shuffle → exact batches → prefetch) vs a raw sequential
tf.data read of the same files with the same parser and batch size. Script mode: run by ``train``.

Hyperparameters: ``order`` ("ours,raw" or "raw,ours"), ``passes`` (timed epochs per side).
Prints ``BENCH read impl=… records=… seconds=…`` per timed epoch.
"""

import time
from pathlib import Path

import tensorflow as tf
from model_module import parse_record
from trainer_input import trainer_input

trainer = trainer_input(Path(__file__).with_name("model_module.py"))
hp, batch = trainer.hyperparameters, trainer.batch
files = sorted(str(path) for path in trainer.train_dir.glob("*.tfrecord"))


def ours(epoch: int) -> tf.data.Dataset:
    return trainer.epochs_up_to(epoch).one_epoch(epoch)


def raw(_epoch: int) -> tf.data.Dataset:
    return (
        tf.data.TFRecordDataset(files)
        .map(lambda record: parse_record(record, hp), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch)
        .prefetch(tf.data.AUTOTUNE)
    )


def read_all(dataset: tf.data.Dataset) -> int:
    records = 0
    for _features, labels in dataset:
        records += int(labels.shape[0])
    return records


readers = {"ours": ours, "raw": raw}
order = hp.get("order", "ours,raw").split(",")
for name in order:  # warm-up: page cache, tf.data function tracing
    read_all(readers[name](0))
for epoch in range(1, hp.get("passes", 3) + 1):
    for name in order if epoch % 2 else list(reversed(order)):
        began = time.perf_counter()
        records = read_all(readers[name](epoch))
        seconds = time.perf_counter() - began
        print(f"BENCH read impl={name} records={records} seconds={seconds:.6f}", flush=True)
