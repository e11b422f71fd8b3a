"""tf.data readers: this rank's records of a channel, unbatched, in a deterministic order; and per-epoch
shuffled, batched pipelines with exactly the planned batch sizes.

Default readers: ``.npz`` (arrays ``x`` and ``y``), ``.npy`` pairs (``<stem>x.npy``/``<stem>y.npy``),
CSV (a header row; the label column named by the ``label_column`` hyperparameter, every other column a
float feature), TFRecord through the module's ``parse_record(serialized, hp)``. A module's
``input_fn(channel, hp)`` replaces them all.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from sagetrain.errors import UserError
from sagetrain.trainer.channels import Channel, DataFormat, npy_labels_path
from sagetrain.trainer.contract import ModelModule, call_user, describe_message
from sagetrain.trainer.sharding import ShardLevel, locate_span, record_span
from sagetrain.trainer.tfrecord_frames import FrameError, count_files


@dataclass(frozen=True)
class Reader:
    """What turns a channel's files into records, for error messages: ``name`` (e.g. "parse_record in
    model.py") and ``hint``, what to check when it fails on the data."""

    name: str
    hint: str


@dataclass(frozen=True)
class RankRecords:
    """This rank's records of one channel: an unbatched dataset, how many records it yields, and the
    reader that produces them."""

    channel: Channel
    dataset: tf.data.Dataset
    count: int
    reader: Reader


_FRAMING = Reader("the TFRecord reader", "check that the files are complete TFRecord files")
# As TensorFlow's reader names them, so a file the count cannot open reads as one TensorFlow could not.
_OS_ERRORS: dict[type[OSError], type[tf.errors.OpError]] = {
    FileNotFoundError: tf.errors.NotFoundError,
    PermissionError: tf.errors.PermissionDeniedError,
}

# What TensorFlow raises when reading records fails. When its message quotes bytes that are not UTF-8 (a
# binary record parse_record cannot parse, say), the OpError cannot be made and Python gets the
# UnicodeDecodeError of that message instead.
READ_ERRORS = (tf.errors.OpError, UnicodeDecodeError)
# TensorFlow quotes whole records; a sentence keeps the start of that.
_MESSAGE_LIMIT = 400
# The node TensorFlow names when a traced step fails in its next(iterator), i.e. in the input pipeline.
_INPUT_NODE = re.compile(r"\[\[(\{\{node )?IteratorGetNext\b")


def _tf_message(error: BaseException) -> str:
    if isinstance(error, UnicodeDecodeError) and isinstance(error.object, bytes):
        return error.object.decode("utf-8", "backslashreplace")
    return str(error)


def describe_read_error(error: BaseException) -> str:
    """TensorFlow's error about records as ``Type: message`` on one line, at most ~400 characters."""
    kind = "TensorFlow error" if isinstance(error, UnicodeDecodeError) else type(error).__name__
    text = describe_message(kind, _tf_message(error))
    return text if len(text) <= _MESSAGE_LIMIT else f"{text[:_MESSAGE_LIMIT]}…"


def raised_by_input(error: BaseException) -> bool:
    """Whether an error of a traced step that takes its batch with next(iterator) came from that iterator
    (the channel's reader) rather than from the model: TensorFlow names the failing node."""
    return isinstance(error, READ_ERRORS) and _INPUT_NODE.search(_tf_message(error)) is not None


def read_error(channel: Channel, reader: Reader, error: BaseException, where: str = "") -> UserError:
    """TensorFlow's error about a channel's data (found while iterating it) as one user-error sentence;
    ``where`` (e.g. " on rank 1 at step 3 of epoch 2") says when, for errors found in training."""
    return UserError(
        f"channel {channel.name!r}: {reader.name} cannot read its records{where}: "
        f"{describe_read_error(error).rstrip('.')}; {reader.hint}."
    )


def read_batches(records: RankRecords, batches: tf.data.Dataset) -> Iterator[Any]:
    """Iterate ``batches`` made from ``records``; a failure to read them becomes the reader's user error."""
    iterator = iter(batches)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except READ_ERRORS as error:
            raise read_error(records.channel, records.reader, error) from error
        yield batch


def _load_npz(path: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path, allow_pickle=False) as arrays:
        missing = [key for key in ("x", "y") if key not in arrays.files]
        if missing:
            raise UserError(
                f"{path} has arrays {arrays.files}; the .npz reader needs arrays named 'x' and 'y'."
            )
        return arrays["x"], arrays["y"]


def _load_npy_pair(path: str) -> tuple[np.ndarray, np.ndarray]:
    return np.load(path, allow_pickle=False), np.load(npy_labels_path(Path(path)), allow_pickle=False)


def _numpy_records(channel: Channel) -> tuple[tf.data.Dataset, int]:
    load = _load_npz if channel.data_format is DataFormat.NPZ else _load_npy_pair
    features, labels = [], []
    for path in channel.files:
        x, y = load(path)
        if len(x) != len(y):
            raise UserError(f"{path}: x has {len(x)} records but y has {len(y)}; they must match.")
        features.append(x)
        labels.append(y)
    x_all, y_all = np.concatenate(features), np.concatenate(labels)
    return tf.data.Dataset.from_tensor_slices((x_all, y_all)), len(x_all)


def _csv_header(path: str) -> list[str]:
    with Path(path).open(newline="") as handle:
        return next(csv.reader(handle), [])


def _csv_records(channel: Channel, label_column: str) -> tf.data.Dataset:
    header = _csv_header(channel.files[0])
    for path in channel.files[1:]:
        if _csv_header(path) != header:
            raise UserError(
                f"channel {channel.name!r}: {path} has a different header row than {channel.files[0]}."
            )
    if label_column not in header:
        raise UserError(
            f"channel {channel.name!r}: {channel.files[0]} has no column {label_column!r} "
            f"(columns: {header}); "
            f"set the hyperparameter label_column to the label's column name."
        )
    label_index = header.index(label_column)
    columns = tf.data.experimental.CsvDataset(
        list(channel.files), record_defaults=[tf.float32] * len(header), header=True
    )

    def to_pair(*values: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        features = [value for index, value in enumerate(values) if index != label_index]
        return tf.stack(features), values[label_index]

    return columns.map(to_pair, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _count(dataset: tf.data.Dataset, channel: Channel, reader: Reader) -> int:
    known = int(dataset.cardinality())
    if known >= 0:
        return known
    if known == tf.data.INFINITE_CARDINALITY:
        raise UserError(
            f"{reader.name} returned an infinite dataset for channel {channel.name!r} (does it end with "
            f".repeat()?); return every record once: the trainer runs the epochs itself."
        )

    def add_one(count: tf.Tensor, _record: object) -> tf.Tensor:
        return count + 1

    try:
        return int(dataset.reduce(np.int64(0), add_one))
    except READ_ERRORS as error:
        raise read_error(channel, reader, error) from error


def _keep_record_shard(dataset: tf.data.Dataset, channel: Channel) -> tf.data.Dataset:
    if channel.shard.level is ShardLevel.RECORD:
        return dataset.shard(channel.shard.record_count, channel.shard.record_index)
    return dataset


def _check_pairs(dataset: object, where: str) -> tf.data.Dataset:
    if not isinstance(dataset, tf.data.Dataset):
        raise UserError(f"{where} must return a tf.data.Dataset, got {type(dataset).__name__}.")
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise UserError(
            f"{where} must yield (features, label) pairs, but its elements are {spec}; return e.g. "
            f"dataset.map(lambda record: (features, label)) without batching."
        )
    return dataset


def rank_records(
    channel: Channel, module: ModelModule, hp: Mapping[str, object], label_column: str
) -> RankRecords:
    """This rank's share of ``channel`` as unbatched (features, label) records, counted."""
    if module.input_fn is not None:
        returned = call_user(
            module, "input_fn", module.input_fn, channel, hp, about=f"channel {channel.name!r}"
        )
        reader = Reader(f"input_fn in {module.path.name}", "fix input_fn or the files it reads")
        dataset = _keep_record_shard(
            _check_pairs(returned, f"{reader.name} (channel {channel.name!r})"), channel
        )
        return RankRecords(channel, dataset, _count(dataset, channel, reader), reader)
    if channel.data_format in (DataFormat.NPZ, DataFormat.NPY):
        dataset, _ = _numpy_records(channel)
        reader = Reader(f"the .{channel.data_format.value} reader", "check the arrays x and y")
        dataset = _keep_record_shard(dataset, channel)
        return RankRecords(channel, dataset, _count(dataset, channel, reader), reader)
    if channel.data_format is DataFormat.CSV:
        reader = Reader(
            "the CSV reader",
            "every value (the label too) must be a number; read other data with input_fn(channel, hp)",
        )
        dataset = _keep_record_shard(_csv_records(channel, label_column), channel)
        return RankRecords(channel, dataset, _count(dataset, channel, reader), reader)
    if channel.data_format is DataFormat.TFRECORD:
        if module.parse_record is None:
            raise UserError(
                f"channel {channel.name!r} holds TFRecord files; define parse_record(serialized, hp) in "
                f"{module.path.name} (returning (features, label)) or input_fn(channel, hp)."
            )
        raw, count = _tfrecord_share(channel)
        parse = _traced_parser(module, module.parse_record, hp, channel.name)
        reader = Reader(
            f"parse_record in {module.path.name}",
            "make its feature names, types and shapes match the records",
        )
        dataset = _check_pairs(
            raw.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True),
            f"{reader.name} (channel {channel.name!r})",
        )
        return RankRecords(channel, dataset, count, reader)
    raise UserError(f"channel {channel.name!r}: no reader for its files; define input_fn(channel, hp).")


def _tfrecord_share(channel: Channel) -> tuple[tf.data.Dataset, int]:
    """This rank's raw records of a TFRecord channel and how many they are, counted from the files' frame
    headers (no second read of the records before training). A record-level shard is this rank's
    contiguous run of all files' records: only the files holding it are read."""
    counts = _frame_counts(channel)
    shard = channel.shard
    if shard.level is ShardLevel.FILE:
        return _tfrecord_dataset(channel.files), sum(counts)
    span = locate_span(counts, record_span(sum(counts), shard.record_index, shard.record_count))
    files = channel.files[span.first : span.stop]
    return _tfrecord_dataset(files).skip(span.skip).take(span.records), span.records


def _tfrecord_dataset(files: tuple[str, ...]) -> tf.data.Dataset:
    # One file after another: reading 16 at a time (deterministic parallel interleave) took 1.5-4.5x as
    # long for 10,000 small local files and 3-4x for 2 large ones (docs/performance.md).
    # A string vector even when empty (a rank whose run holds no record), which a bare () would not be.
    return tf.data.TFRecordDataset(tf.constant(files, dtype=tf.string, shape=[len(files)]))


def _frame_counts(channel: Channel) -> tuple[int, ...]:
    """The records of each of the channel's files, from their frame headers."""
    try:
        return count_files(channel.files, concurrent_opens=channel.declared.input_mode.fetched_on_open)
    except FrameError as error:
        as_tensorflow_says: tf.errors.OpError = tf.errors.DataLossError(None, None, str(error))
        raise read_error(channel, _FRAMING, as_tensorflow_says) from error
    except OSError as error:  # a file gone, unreadable, or a network file system's I/O error
        kind = _OS_ERRORS.get(type(error), tf.errors.UnknownError)
        raise read_error(channel, _FRAMING, kind(None, None, str(error))) from error


def _traced_parser(
    module: ModelModule, parse_record: Callable[..., Any], hp: Mapping[str, object], channel: str
) -> Callable[[tf.Tensor], object]:
    def parse(serialized: tf.Tensor) -> object:
        return call_user(module, "parse_record", parse_record, serialized, hp, about=f"channel {channel!r}")

    return parse


def epoch_seed(seed: int, epoch: int, shard_index: int) -> int:
    """A shuffle seed per (job seed, epoch, shard member): a resumed run replays the same order."""
    return int(np.random.SeedSequence([seed, epoch, shard_index]).generate_state(1, dtype=np.uint32)[0])


def _epoch_pass(
    records: RankRecords, *, sizes: tuple[int, ...], seed: int | None, shuffle_buffer: int
) -> tf.data.Dataset:
    """One pass over this rank's records as ``len(sizes)`` batches of exactly ``sizes`` (after a seeded
    shuffle): ``rebatch`` with a list of sizes cuts batches of those sizes in turn."""
    dataset = records.dataset
    if seed is not None and shuffle_buffer > 0:
        dataset = dataset.shuffle(
            min(shuffle_buffer, records.count), seed=seed, reshuffle_each_iteration=False
        )
    dataset = dataset.take(int(sum(sizes)))
    if len(set(sizes)) == 1:
        return dataset.batch(sizes[0])
    return dataset.batch(max(sizes)).rebatch(list(sizes))


def epoch_batches(
    records: RankRecords,
    *,
    sizes: tuple[int, ...],
    seed: int | None,
    shuffle_buffer: int,
    skip_steps: int = 0,
) -> tf.data.Dataset:
    """One epoch of this rank's records as ``len(sizes)`` batches of exactly ``sizes``, in one pass
    (after a seeded shuffle), from step ``skip_steps``, prefetched."""
    batches = _epoch_pass(records, sizes=sizes, seed=seed, shuffle_buffer=shuffle_buffer)
    return batches.skip(skip_steps).prefetch(tf.data.AUTOTUNE)


class EpochBatches:
    """This rank's training batches epoch by epoch, as iterators the traced step takes them from; the
    caller takes every batch of an epoch (``steps``) before asking for the next epoch's.

    A shuffled epoch is its own pipeline, in the order of the epoch's seed for this shard member, so a
    resumed run replays it. Without a shuffle every epoch is the same batches: the epochs from one begun
    at its first step to ``last_epoch`` are one pipeline repeated, read by one iterator, as a plain
    script's repeated dataset is. The epochs after the first then start no iterator of their own, which
    took a third or more of a one-step epoch on Horovod, and the next epoch's first batches are read
    while this one ends (its metrics, validation and checkpoint). Each pass must hold the epoch's number
    of batches, so records that change between passes fail at the step that misses its batch
    (``came_up_short``) instead of moving batches between epochs."""

    def __init__(
        self,
        records: RankRecords,
        *,
        sizes: tuple[int, ...],
        job_seed: int,
        shard_index: int,
        shuffle_buffer: int,
        last_epoch: int,
    ) -> None:
        self._records, self._sizes, self._shuffle_buffer = records, sizes, shuffle_buffer
        self._job_seed, self._shard_index, self._last_epoch = job_seed, shard_index, last_epoch
        # The next epoch the repeated pipeline's iterator is at the start of, and that iterator.
        self._repeating: tuple[int, Iterator[Any]] | None = None
        # What tf.data's assert_cardinality says of a repeated pass with fewer batches than an epoch's.
        self._short_pass = re.compile(
            rf"Input dataset was expected to contain {self.steps} elements? but contained only"
        )

    @property
    def steps(self) -> int:
        return len(self._sizes)

    def _repeats(self, skip_steps: int) -> bool:
        return self._shuffle_buffer == 0 and skip_steps == 0

    def iterator(self, epoch: int, skip_steps: int = 0) -> Iterator[Any]:
        """The iterator of ``epoch``'s batches from step ``skip_steps``."""
        if epoch > self._last_epoch:
            raise ValueError(f"epoch {epoch} is after the last epoch, {self._last_epoch}")
        if not self._repeats(skip_steps):
            return iter(self.one_epoch(epoch, skip_steps))
        if self._repeating is None or self._repeating[0] != epoch:
            repeated = _epoch_pass(self._records, sizes=self._sizes, seed=None, shuffle_buffer=0)
            repeated = repeated.apply(tf.data.experimental.assert_cardinality(self.steps))
            passes = self._last_epoch - epoch + 1
            self._repeating = (epoch, iter(repeated.repeat(passes).prefetch(tf.data.AUTOTUNE)))
        iterator = self._repeating[1]
        self._repeating = (epoch + 1, iterator)
        return iterator

    def came_up_short(self, error: BaseException, skip_steps: int) -> bool:
        """Whether a traced step's failure, in an epoch begun at step ``skip_steps``, is its repeated
        pipeline finding a pass with fewer batches than an epoch's: the records changed between passes.
        (A user's own assert_cardinality names the records it expected, not this pass's batches.)"""
        return (
            self._repeats(skip_steps)
            and isinstance(error, tf.errors.FailedPreconditionError)
            and raised_by_input(error)
            and self._short_pass.search(str(error)) is not None
        )

    def one_epoch(self, epoch: int, skip_steps: int = 0) -> tf.data.Dataset:
        """``epoch``'s batches alone as a dataset, from step ``skip_steps``."""
        seed = epoch_seed(self._job_seed, epoch, self._shard_index) if self._shuffle_buffer > 0 else None
        return epoch_batches(
            self._records,
            sizes=self._sizes,
            seed=seed,
            shuffle_buffer=self._shuffle_buffer,
            skip_steps=skip_steps,
        )


def evaluation_batches(records: RankRecords, batch_size: int) -> tf.data.Dataset:
    return records.dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
