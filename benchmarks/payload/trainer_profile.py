"""The managed trainer's time by stage, on this job's ``train`` channel (benchmarks/lab/trainer_profile.py
runs it): listing, sharding, counting records (a full TFRecord read, as the trainer counted before, and
the frame headers it reads now), opening and reading the files (one after another, as plain tf.data and
the trainer do, and 16 at a time interleaved, tried and not kept), the trainer's preparation, connecting
to the other ranks (Horovod's start-up), parsing, the seeded shuffle, the exact batches, the training
steps without and with the engine's collectives, a checkpoint, the model's export.
Script mode: run by ``train``, on 1 host or more.

Prints ``BENCH stage rank=R name=… seconds=… records=…`` per stage (the reads time one full pass after
a warm-up pass, so the page cache and tf.data's tracing are out of them).
"""

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from sagetrain.trainer.channels import list_data_files, open_channel
from sagetrain.trainer.checkpoints import CheckpointMeta, Progress, write_checkpoint
from sagetrain.trainer.collectives import make_collectives
from sagetrain.trainer.export import export_model
from sagetrain.trainer.hyperparameters import settings_from
from sagetrain.trainer.job import trainer_job
from sagetrain.trainer.loop import make_train_step, model_variables, optimizer_variables, values_of
from sagetrain.trainer.preparation import TRAIN, prepare
from sagetrain.trainer.readers import epoch_batches, epoch_seed
from sagetrain.trainer.sharding import batch_sizes, steps_per_epoch
from sagetrain.trainer.tfrecord_frames import count_files

job = trainer_job(os.environ)
settings = settings_from(job.config.hyperparameters, job.paths.hyperparameters)
batch = settings.per_rank_batch_size(job.ranks.size)
rank = job.ranks.rank
folder = job.paths.channel_dir(TRAIN)
declared = job.channel(TRAIN)
if declared is None:
    raise SystemExit("the profile needs a train channel")
spec = declared
# Before any other TensorFlow op, as the trainer makes them (the engine may configure TensorFlow's runtime).
collectives = make_collectives(job.engine, job.ranks)


def report(name: str, seconds: float, records: int = 0) -> None:
    print(f"BENCH stage rank={rank} name={name} seconds={seconds:.6f} records={records}", flush=True)


def timed(name: str, work: Callable[[], Any], records: Callable[[Any], int] = lambda _: 0) -> Any:
    began = time.perf_counter()
    result = work()
    report(name, time.perf_counter() - began, records(result))
    return result


def read_pass(dataset: tf.data.Dataset) -> int:
    records = 0
    for element in dataset:
        records += int(tf.shape(tf.nest.flatten(element)[0])[0])
    return records


def timed_read(name: str, make: Callable[[], tf.data.Dataset]) -> None:
    read_pass(make())  # warm-up: page cache, tf.data's tracing
    timed(name, lambda: read_pass(make()), lambda records: records)


class NoCollectives:
    """The step without any collective, to time what the engine's add."""

    def reduce_step(self, gradients: list, weight: tf.Tensor, stop_flag: tf.Tensor) -> tuple:
        return gradients, stop_flag


listed = timed("listing", lambda: list_data_files(folder), len)
channel = timed("listing+sharding", lambda: open_channel(spec, folder, job.ranks, reader_needs_format=False))
files = list(channel.files)
timed(
    "counting: full TFRecord read",
    lambda: int(tf.data.TFRecordDataset(files).reduce(np.int64(0), lambda count, _: count + 1)),
    lambda count: count,
)
timed("counting: frame headers", lambda: sum(count_files(files)), lambda count: count)
timed_read("read: one file after another", lambda: tf.data.TFRecordDataset(files).batch(1024))
timed_read(
    "read: 16 files at a time, interleaved",
    lambda: (
        tf.data.Dataset.from_tensor_slices(files)
        .interleave(
            tf.data.TFRecordDataset,
            cycle_length=16,
            block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        .batch(1024)
    ),
)

prepared = timed(
    "prepare (module, model, count, first batch)",
    lambda: prepare(job, settings, Path(__file__).with_name("model_module.py"), batch),
)
records = prepared.train
# After the stages above, as the trainer connects once it has prepared (Horovod polls from then on).
timed("connect", collectives.connect)
counts = collectives.allgather_object(records.count)
steps = steps_per_epoch(counts, batch)
sizes = batch_sizes(records.count, steps, batch)
timed_read("read+parse", lambda: records.dataset.batch(batch))
timed_read(
    "read+parse+shuffle",
    lambda: records.dataset.shuffle(min(settings.shuffle_buffer, records.count), seed=1).batch(batch),
)


def epoch(number: int) -> tf.data.Dataset:
    return epoch_batches(
        records,
        sizes=sizes,
        seed=epoch_seed(settings.seed, number, rank),
        shuffle_buffer=settings.shuffle_buffer,
    )


timed_read("read+parse+shuffle+exact batches (an epoch's input)", lambda: epoch(1))
flag = tf.constant(0.0)


def train_epoch(step: Callable[[Any, tf.Tensor], tf.Tensor], number: int) -> int:
    iterator = iter(epoch(number))
    for _ in range(steps):
        float(step(iterator, flag))
    return sum(sizes)


def time_training(name: str, reducer: Any) -> None:
    step = make_train_step(prepared, reducer)
    train_epoch(step, 1)  # tracing
    timed(f"train epoch: input+steps, {name}", lambda: train_epoch(step, 2), lambda done: done)


time_training("alone", NoCollectives())
time_training("with the engine's collectives", collectives)

meta = CheckpointMeta(Progress(1, 0), settings.seed, job.ranks.size, settings.batch_size, steps)
with tempfile.TemporaryDirectory() as scratch:
    timed(
        "checkpoint",
        lambda: write_checkpoint(
            Path(scratch),
            meta,
            values_of(model_variables(prepared)),
            values_of(optimizer_variables(prepared)),
        ),
    )
with tempfile.TemporaryDirectory() as scratch:
    timed("export (SavedModel and .keras)", lambda: export_model(prepared.model, Path(scratch)))
print(
    f"BENCH profile rank={rank} steps={steps} batch={batch} files={len(files)} listed={len(listed)}",
    flush=True,
)
