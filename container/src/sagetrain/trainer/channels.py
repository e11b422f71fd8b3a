"""Channels on disk: list their files, recognise their format, and decide this rank's share. No TensorFlow.

``Channel`` is what ``input_fn(channel, hp)`` receives. With file-level sharding ``channel.files`` are
already this rank's files; with record-level sharding they are all files and the trainer keeps every
``count``-th record of what ``input_fn`` returns, so ``input_fn`` must read ``files`` in order and must
not shuffle or shard by itself.
"""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from itertools import repeat
from operator import attrgetter
from pathlib import Path

from sagetrain.config.channels import Channel as ChannelConfig
from sagetrain.config.channels import InputMode, S3Distribution
from sagetrain.contracts import RankPlace
from sagetrain.errors import UserError
from sagetrain.trainer.host_once import once_per_host
from sagetrain.trainer.sharding import DataFile, Deal, ShardPlan, deal_files
from sagetrain.trainer.shared_deal import deal_from, deal_name, deal_text


class DataFormat(Enum):
    NPZ = "npz"
    NPY = "npy"
    CSV = "csv"
    TFRECORD = "tfrecord"
    OTHER = "other"


TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfr")
TFRECORD_CONTENT_TYPES = ("application/x-tfrecord", "application/x-tfexample")
NPY_FEATURES_SUFFIX = "x.npy"
NPY_LABELS_SUFFIX = "y.npy"


@dataclass(frozen=True)
class Channel:
    """One channel of the job (``declared``, as inputdataconfig.json says) as this rank sees it: its
    folder, the files it reads, their format and this rank's share."""

    declared: ChannelConfig
    directory: Path
    files: tuple[str, ...]
    data_format: DataFormat
    shard: ShardPlan

    @property
    def name(self) -> str:
        return self.declared.name

    @property
    def content_type(self) -> str | None:
        return self.declared.content_type

    @property
    def input_mode(self) -> str:
        """As SageMaker spells it: "File", "FastFile"."""
        return self.declared.input_mode.value


def list_data_files(directory: Path) -> list[DataFile]:
    """Regular files under ``directory``, recursively, with their sizes, sorted by path (as sharding
    orders them); hidden files and folders skipped (SageMaker and editors leave ``.``-files behind),
    symlinked folders not entered.

    One ``scandir`` walk with one stat per file, kept as strings: a channel can hold 100,000 files, and
    the first rank of every host lists it before its first batch (every rank, without a folder to share
    the listing in; Path objects, their sorting and three stats per file took seconds there)."""
    found = []
    pending = [str(directory)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file():
                    found.append(DataFile(entry.path, entry.stat().st_size))
    found.sort(key=attrgetter("path"))
    return found


def format_of(channel: str, paths: Sequence[str], content_type: str | None) -> DataFormat:
    """The one format of a channel's files; mixed formats are an error (which reader would apply?)."""

    def one(path: str) -> DataFormat:
        name = path.rpartition(os.sep)[2].lower()  # not Path(path).name: once per file of a channel
        if name.endswith(".npz"):
            return DataFormat.NPZ
        if name.endswith(".npy"):
            return DataFormat.NPY
        if name.endswith(".csv"):
            return DataFormat.CSV
        if name.endswith(TFRECORD_SUFFIXES) or (content_type or "").lower() in TFRECORD_CONTENT_TYPES:
            return DataFormat.TFRECORD
        return DataFormat.OTHER

    # Which format a name has depends only on the text from its last dot (every suffix above has one dot,
    # at its start), so one path per distinct ending decides for all. A name without a dot gives an ending
    # holding a "/" or the path's last character, neither of which ends in a known suffix, as one() finds
    # for the name itself.
    by_ending = _one_ending(paths) or {path[path.rfind(".") :].lower(): path for path in paths}
    formats = {one(path): path for path in by_ending.values()}
    if len(formats) > 1:
        examples = ", ".join(
            f"{Path(path).name} ({data_format.value})" for data_format, path in formats.items()
        )
        raise UserError(f"channel {channel!r} mixes file formats ({examples}); keep one format per channel.")
    return next(iter(formats), DataFormat.OTHER)


def _one_ending(paths: Sequence[str]) -> dict[str, str]:
    """{ending: first path} when every path ends with the first one's text from its last dot, as a channel
    of one kind of file does; else empty. The ending holds one dot, at its start, so a path that ends with
    it has the same ending. Checked without a Python call per path: slicing and lowering each of a
    channel's 100,000 paths took 0.03-0.06 s of a listing."""
    first = paths[0] if paths else ""
    dot = first.rfind(".")
    if dot < 0 or not all(map(str.endswith, paths, repeat(first[dot:]))):
        return {}
    return {first[dot:].lower(): first}


def npy_labels_path(features: Path) -> Path:
    return features.with_name(features.name[: -len(NPY_FEATURES_SUFFIX)] + NPY_LABELS_SUFFIX)


def sharding_units(channel: str, files: Sequence[DataFile], data_format: DataFormat) -> list[DataFile]:
    """The files sharding deals out. ``.npy`` data comes in pairs ``<stem>x.npy`` + ``<stem>y.npy``
    (e.g. ``x.npy``/``y.npy`` or ``part0_x.npy``/``part0_y.npy``), dealt out as one unit."""
    if data_format is not DataFormat.NPY:
        return list(files)
    sizes = {item.path: item.size for item in files}
    units = []
    for item in files:
        path = Path(item.path)
        if (
            path.name.endswith(NPY_LABELS_SUFFIX)
            and str(path.with_name(path.name[: -len(NPY_LABELS_SUFFIX)] + NPY_FEATURES_SUFFIX)) in sizes
        ):
            continue
        labels = str(npy_labels_path(path))
        if not path.name.endswith(NPY_FEATURES_SUFFIX) or labels not in sizes:
            raise UserError(
                f"channel {channel!r}: {path} has no partner; .npy files come in pairs named "
                f"<stem>x.npy (features) and <stem>y.npy (labels)."
            )
        units.append(DataFile(item.path, item.size + sizes[labels]))
    return units


def shard_group(spec: ChannelConfig, ranks: RankPlace) -> tuple[int, int]:
    """(index, count) of this rank among the ranks that split this channel's files between them.

    ShardedByS3Key: SageMaker already gave each host different files, so only the host's local ranks
    split them; FullyReplicated: every host has all files, so all ranks split them.
    """
    if spec.s3_distribution is S3Distribution.SHARDED_BY_S3_KEY:
        return ranks.local_rank, ranks.local_size
    return ranks.rank, ranks.size


def fed_by_fifo(spec: ChannelConfig, folder: Path) -> bool:
    """Whether SageMaker's Pipe FIFO of epoch 0 (``<channel>_0``) is beside the channel's folder, whatever
    inputdataconfig.json says."""
    fifo = folder.with_name(f"{spec.name}_0")
    return fifo.exists() and stat.S_ISFIFO(fifo.stat().st_mode)


def reject_unshardable(spec: ChannelConfig, folder: Path) -> None:
    """The managed trainer reads a channel only when its input mode lets it deal the records out between
    ranks; the sentence offers the modes that do."""
    mode = InputMode.PIPE if fed_by_fifo(spec, folder) else spec.input_mode
    if not mode.shardable:
        readable = " or ".join(repr(other.value) for other in InputMode if other.shardable)
        raise UserError(
            f"channel {spec.name!r} uses {mode.value} input mode, which the managed Keras trainer does not "
            f"read ({mode.medium} cannot be split between ranks); set input_mode={readable} for it, or train "
            f"with a script instead of a model module."
        )


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block, and afterwards as it was before. For work
    that makes many lasting objects none of which can be in a cycle: each batch of them that survives sets
    off a full pass over every object the process holds, and after TensorFlow and Keras are imported that
    is a large heap."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _list_and_deal(spec: ChannelConfig, folder: Path, members: int) -> tuple[DataFormat, Deal]:
    """The channel's format and every member's share of its files, from one listing of ``folder``."""
    listed = list_data_files(folder)
    if not listed:
        raise UserError(f"channel {spec.name!r} has no files in {folder}; add data or remove the channel.")
    # An empty file holds no record in any format (and Spark's _SUCCESS markers are empty): skipped, so
    # it neither fails a reader nor counts as a file when dealing files out.
    readable = [item for item in listed if item.size > 0]
    if not readable:
        raise UserError(
            f"channel {spec.name!r} has no records: its {len(listed)} file(s) in {folder} are "
            f"empty; add data or remove the channel."
        )
    data_format = format_of(spec.name, [item.path for item in readable], spec.content_type)
    return data_format, deal_files(sharding_units(spec.name, readable, data_format), members)


def _dealt_text(folder: Path, dealt: tuple[DataFormat, Deal]) -> str:
    data_format, deal = dealt
    return deal_text(folder, data_format.value, deal)


def _dealt_from(text: str, folder: Path, members: int) -> tuple[DataFormat, Deal]:
    data_format, deal = deal_from(text, folder, members)
    return DataFormat(data_format), deal


def open_channel(
    spec: ChannelConfig,
    folder: Path,
    ranks: RankPlace,
    *,
    reader_needs_format: bool,
    shared_in: Path | None = None,
) -> Channel:
    """This rank's view of a channel whose data is in ``folder``. ``reader_needs_format``: no
    ``input_fn``, so a default reader must recognise the files. ``shared_in``: where this host's ranks
    share the channel's listing and deal, made by the first of them (trainer/host_once.py)."""
    reject_unshardable(spec, folder)
    if not folder.is_dir():
        raise UserError(f"channel {spec.name!r}: its folder {folder} does not exist.")
    index, count = shard_group(spec, ranks)
    # Listing and dealing keep a tuple per file (100,000 for a large channel), and so does reading back a
    # shared deal: with the collector on, its full passes over TensorFlow's heap took up to two fifths of
    # that time.
    with collector_paused():
        data_format, deal = once_per_host(
            shared_in,
            deal_name(folder, count),
            lambda: _list_and_deal(spec, folder, count),
            write=lambda dealt: _dealt_text(folder, dealt),
            read=lambda text: _dealt_from(text, folder, count),
        )
    if reader_needs_format and data_format is DataFormat.OTHER:
        raise UserError(
            f"channel {spec.name!r}: no reader for files like {Path(deal.files[0].path).name}; use .npz, "
            f".npy pairs, .csv or TFRecord (.tfrecord with parse_record), or define input_fn(channel, hp) "
            f"in the module."
        )
    shard = deal.plan(index)
    files = tuple(unit.path for unit in shard.files)
    return Channel(declared=spec, directory=folder, files=files, data_format=data_format, shard=shard)
