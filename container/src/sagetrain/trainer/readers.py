"""tf.data readers: this rank's records of a channel, unbatched, in a deterministic order; and per-epoch
shuffled, batched pipelines with exactly the planned batch sizes.

Default readers: ``.npz`` (arrays ``x`` and ``y``), ``.npy`` pairs (``<stem>x.npy``/``<stem>y.npy``),
CSV (a header row; the label column named by the ``label_column`` hyperparameter, every other column a
float feature), TFRecord through the module's ``parse_record(serialized, hp)``. A module's
``input_fn(channel, hp)`` replaces them all.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from sagetrain.errors import UserError
from sagetrain.trainer.channels import Channel, DataFormat, npy_labels_path
from sagetrain.trainer.contract import ModelModule, call_user
from sagetrain.trainer.sharding import ShardLevel


@dataclass(frozen=True)
class RankRecords:
    """This rank's records of one channel: an unbatched dataset and how many records it yields."""

    channel: Channel
    dataset: tf.data.Dataset
    count: int


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


def _count(dataset: tf.data.Dataset) -> int:
    known = int(dataset.cardinality())
    if known >= 0:
        return known

    def add_one(count: tf.Tensor, _record: object) -> tf.Tensor:
        return count + 1

    return int(dataset.reduce(np.int64(0), add_one))


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
        where = f"input_fn in {module.path.name} (channel {channel.name!r})"
        dataset = _keep_record_shard(_check_pairs(returned, where), channel)
        return RankRecords(channel, dataset, _count(dataset))
    if channel.data_format in (DataFormat.NPZ, DataFormat.NPY):
        dataset, _ = _numpy_records(channel)
        dataset = _keep_record_shard(dataset, channel)
        return RankRecords(channel, dataset, _count(dataset))
    if channel.data_format is DataFormat.CSV:
        dataset = _keep_record_shard(_csv_records(channel, label_column), channel)
        return RankRecords(channel, dataset, _count(dataset))
    if channel.data_format is DataFormat.TFRECORD:
        if module.parse_record is None:
            raise UserError(
                f"channel {channel.name!r} holds TFRecord files; define parse_record(serialized, hp) in "
                f"{module.path.name} (returning (features, label)) or input_fn(channel, hp)."
            )
        raw = _keep_record_shard(tf.data.TFRecordDataset(list(channel.files)), channel)
        count = _count(raw)
        parse = _traced_parser(module, hp, channel.name)
        dataset = _check_pairs(
            raw.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True),
            f"parse_record in {module.path.name} (channel {channel.name!r})",
        )
        return RankRecords(channel, dataset, count)
    raise UserError(f"channel {channel.name!r}: no reader for its files; define input_fn(channel, hp).")


def _traced_parser(
    module: ModelModule, hp: Mapping[str, object], channel: str
) -> Callable[[tf.Tensor], object]:
    parse_record = module.parse_record

    def parse(serialized: tf.Tensor) -> object:
        return call_user(module, "parse_record", parse_record, serialized, hp, about=f"channel {channel!r}")

    return parse


def epoch_seed(seed: int, epoch: int, shard_index: int) -> int:
    """A shuffle seed per (job seed, epoch, shard member): a resumed run replays the same order."""
    return int(np.random.SeedSequence([seed, epoch, shard_index]).generate_state(1, dtype=np.uint32)[0])


def epoch_batches(
    records: RankRecords,
    *,
    sizes: tuple[int, ...],
    seed: int | None,
    shuffle_buffer: int,
    skip_steps: int = 0,
) -> tf.data.Dataset:
    """One epoch of this rank's records as ``len(sizes)`` batches of exactly ``sizes``, in one pass.

    Usually the last batch is not larger than the others and plain ``batch`` does it. When it is (this
    rank folds surplus records into its last step), records are numbered as they come (after a seeded
    shuffle); record ``i`` goes to batch ``min(i // sizes[0], last)``, and each batch is emitted when
    its planned size is reached.
    """
    dataset = records.dataset
    if seed is not None and shuffle_buffer > 0:
        dataset = dataset.shuffle(
            min(shuffle_buffer, records.count), seed=seed, reshuffle_each_iteration=False
        )
    dataset = dataset.take(int(sum(sizes)))
    if sizes[-1] <= sizes[0]:
        return dataset.batch(sizes[0]).skip(skip_steps).prefetch(tf.data.AUTOTUNE)
    batch_size, last = np.int64(sizes[0]), np.int64(len(sizes) - 1)
    last_size, widest = np.int64(sizes[-1]), int(max(sizes))

    def with_batch_number(index: tf.Tensor, record: object) -> tuple[tf.Tensor, object]:
        return tf.minimum(index // batch_size, last), record

    def batch_number(key: tf.Tensor, _record: object) -> tf.Tensor:
        return key

    def planned_size(key: tf.Tensor) -> tf.Tensor:
        return tf.where(key == last, last_size, batch_size)

    def drop_number(_key: tf.Tensor, record: object) -> object:
        return record

    def one_batch(_key: tf.Tensor, window: tf.data.Dataset) -> tf.data.Dataset:
        return window.map(drop_number).batch(widest)

    keyed = dataset.enumerate().map(with_batch_number)
    batches = keyed.group_by_window(
        key_func=batch_number, reduce_func=one_batch, window_size_func=planned_size
    )
    return batches.skip(skip_steps).prefetch(tf.data.AUTOTUNE)


def evaluation_batches(records: RankRecords, batch_size: int) -> tf.data.Dataset:
    return records.dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
