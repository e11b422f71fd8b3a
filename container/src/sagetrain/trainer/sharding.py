"""Sharding arithmetic: which rank reads what, and how many steps an epoch has. Pure; tested with literals.

The rule: every record of a channel is consumed by exactly one rank per
epoch. With at least as many files as shard members, whole files are dealt out, balanced by size, as long
as the deal is even: the lightest member's bytes are at least ``FILE_BALANCE_MIN_RATIO`` (80%) of the
heaviest member's. Otherwise (fewer files than members, or an uneven deal) the shard is by record: of all
files' records in path order, a TFRecord channel (whose records are counted from frame headers before
reading) gives each member one contiguous run (``record_span``), so a member reads only the files that
hold its run; other formats, which cannot be counted before they are read, have every member read all
files and keep every ``count``-th record starting at its index.

Equal steps on every rank: a synchronous step is a collective, so a rank with one batch more than the
others would wait forever. The trainer therefore runs ``steps = ceil(min(records per rank) / batch)``
steps on every rank and spreads each rank's records evenly over them (batch sizes within a rank differ by
at most one). No record is dropped or repeated, no batch is empty, and a rank with a larger shard has
slightly larger batches rather than one huge last batch. Gradients are averaged per step weighted by each
rank's batch length, so every record weighs the same whatever batch it landed in.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import compress, repeat
from operator import eq
from typing import NamedTuple

from sagetrain.errors import UserError

# File-level sharding only when the lightest member gets at least this share of the heaviest member's bytes.
FILE_BALANCE_MIN_RATIO = 0.8


class ShardLevel(Enum):
    FILE = "file"
    RECORD = "record"


class DataFile(NamedTuple):
    """One unit of sharding: a path (or, for .npy pairs, the features file) and its size in bytes.

    A named tuple rather than a frozen dataclass: a channel may list 100,000 of them on every rank
    before its first batch, and dealing them sorts them twice; tuples sort by path, then size, with no
    key function called per file."""

    path: str
    size: int


@dataclass(frozen=True)
class ShardPlan:
    """What one member of a shard group reads.

    ``files`` are read in this order; with ``RECORD`` level the member is number ``record_index`` of
    ``record_count`` sharing the records of that concatenation (see the module's rule).
    """

    level: ShardLevel
    files: tuple[DataFile, ...]
    record_index: int
    record_count: int


@dataclass(frozen=True)
class Deal:
    """Every member's share of a channel's files, as ``plan_shard`` decides it for each: ``files`` in path
    order; dealt by file, ``owners[i]`` is the member that reads ``files[i]``; dealt by record (``owners``
    empty), every member reads all files and keeps its share of their records."""

    files: tuple[DataFile, ...]
    members: int
    owners: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.members < 1:
            raise ValueError(f"members must be at least 1, got {self.members}")
        if self.owners and (
            len(self.owners) != len(self.files) or not set(self.owners) <= set(range(self.members))
        ):
            raise ValueError(f"owners must name one of {self.members} members for each of the files")

    def plan(self, index: int) -> ShardPlan:
        """What member ``index`` reads."""
        if not 0 <= index < self.members:
            raise ValueError(f"shard index {index} is outside 0..{self.members - 1}")
        if not self.owners:
            return ShardPlan(ShardLevel.RECORD, self.files, index, self.members)
        # Picked from the files in path order, so the member's files stay in path order too.
        return ShardPlan(
            ShardLevel.FILE, tuple(compress(self.files, map(eq, self.owners, repeat(index)))), 0, 1
        )


def balance_files(files: Sequence[DataFile], members: int) -> tuple[tuple[DataFile, ...], ...]:
    """Deal files to ``members`` bins, largest first (ties in path order), each to the lightest bin (fewest
    files, then lowest index on ties). Deterministic for a given listing; every bin gets a file when
    ``len(files) >= members``. Each bin keeps its files in path order so reads stay sequential."""
    ordered = tuple(sorted(files))
    owners, _totals = _owners(ordered, members)
    deal = Deal(ordered, members, owners)
    return tuple(deal.plan(member).files for member in range(members))


def _owners(ordered: Sequence[DataFile], members: int) -> tuple[tuple[int, ...], list[int]]:
    """``balance_files``' deal of files already in path order: the bin each file goes to, and each bin's
    bytes (which the deal adds up anyway; ``deal_files`` takes them rather than adding them up again)."""
    if members < 1:
        raise ValueError(f"members must be at least 1, got {members}")
    sizes = [data_file.size for data_file in ordered]
    owners = [0] * len(ordered)
    # (bytes, files, index) of every bin: the heap's smallest is the lightest bin as defined above.
    lightest_first = [(0, 0, index) for index in range(members)]
    # A stable sort keeps equal sizes in path order, even when reversed.
    for position in sorted(range(len(sizes)), key=sizes.__getitem__, reverse=True):
        total, count, index = lightest_first[0]
        owners[position] = index
        heapq.heapreplace(lightest_first, (total + sizes[position], count + 1, index))
    totals = [0] * members
    for total, _count, index in lightest_first:
        totals[index] = total
    return tuple(owners), totals


def _evenly_dealt(totals: Sequence[int]) -> bool:
    return min(totals) > 0 and min(totals) >= FILE_BALANCE_MIN_RATIO * max(totals)


def is_balanced(bins: Sequence[Sequence[DataFile]]) -> bool:
    """Every bin holds bytes, and the lightest at least ``FILE_BALANCE_MIN_RATIO`` of the heaviest."""
    return _evenly_dealt([sum(item.size for item in group) for group in bins])


def deal_files(files: Sequence[DataFile], members: int) -> Deal:
    """Every member's share of a channel's files, for ``members`` members: whole files when they deal
    out evenly (see ``is_balanced``), otherwise a share of all files' records (the module's rule)."""
    ordered = tuple(sorted(files))  # by path (unique), as DataFile tuples sort
    if len(ordered) >= members:
        owners, totals = _owners(ordered, members)
        if _evenly_dealt(totals):
            return Deal(ordered, members, owners)
    return Deal(ordered, members)


def plan_shard(files: Sequence[DataFile], index: int, count: int) -> ShardPlan:
    """This member's share of a channel's files, for member ``index`` of ``count`` (``deal_files``)."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1}")
    return deal_files(files, count).plan(index)


def record_span(total: int, index: int, count: int) -> range:
    """The positions of member ``index``'s contiguous run of ``total`` records shared by ``count``
    members: the runs cover every position once, in member order, and their lengths differ by at most one."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1}")
    return range(total * index // count, total * (index + 1) // count)


@dataclass(frozen=True)
class FileSpan:
    """Where a run of records lies in files of known record counts: ``files[first:stop]`` hold it, after
    the first ``skip`` records of ``files[first]``; it is ``records`` long."""

    first: int
    stop: int
    skip: int
    records: int


def locate_span(records_per_file: Sequence[int], span: range) -> FileSpan:
    """The files holding ``span`` (positions in the concatenation of files of ``records_per_file``
    records): no file before its first record nor after its last one; empty for an empty span."""
    if not span:
        return FileSpan(0, 0, 0, 0)
    first = stop = -1
    file_start = skip = 0
    for position, records in enumerate(records_per_file):
        file_end = file_start + records
        if first < 0 and span.start < file_end:
            first, skip = position, span.start - file_start
        if span.stop <= file_end:
            stop = position + 1
            break
        file_start = file_end
    if first < 0 or stop < 0:
        raise ValueError(f"records {span.start}..{span.stop - 1} lie past the files' {file_start} records")
    return FileSpan(first, stop, skip, len(span))


def steps_per_epoch(records_per_rank: Sequence[int], batch_size: int, cap: int | None = None) -> int:
    """Steps every rank runs in one epoch: the smallest shard decides, so no rank runs out of batches.

    ``cap`` (the ``steps_per_epoch`` hyperparameter) shortens epochs; then records past the cap are not
    seen that epoch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    smallest = min(records_per_rank)
    if smallest < 1:
        raise ValueError("every rank needs at least one record")
    steps = -(-smallest // batch_size)
    return steps if cap is None else min(steps, cap)


def batch_sizes(records: int, steps: int, batch_size: int, *, take_all: bool = True) -> tuple[int, ...]:
    """The size of each of one rank's ``steps`` batches.

    ``take_all`` (no ``steps_per_epoch`` cap): all ``records`` spread evenly over the steps, the larger
    batches first (sizes differ by at most one, as ``numpy.array_split`` does). Otherwise ``steps`` full
    batches of ``batch_size``; the records past them are not seen this epoch.
    """
    if steps < 1 or records < steps:
        raise ValueError(f"cannot split {records} records into {steps} non-empty batches")
    if not take_all:
        if records < steps * batch_size:
            raise ValueError(f"{records} records do not fill {steps} batches of {batch_size}")
        return (batch_size,) * steps
    smaller, larger_count = divmod(records, steps)
    return (smaller + 1,) * larger_count + (smaller,) * (steps - larger_count)


def records_through_step(
    records_per_rank: Sequence[int], steps: int, batch_size: int, step: int, *, take_all: bool = True
) -> int:
    """All ranks' records in an epoch's first ``step`` steps, as ``batch_sizes`` deals each rank's out;
    arithmetic per rank, not a walk over the steps."""
    if not take_all:
        return step * batch_size * len(records_per_rank)
    total = 0
    for records in records_per_rank:
        smaller, larger_count = divmod(records, steps)
        total += step * smaller + min(step, larger_count)
    return total


def check_records_per_rank(channel: str, records_per_rank: Sequence[int]) -> None:
    """Fail alike on every rank when any rank would get no record of ``channel`` (training needs all)."""
    check_has_records(channel, records_per_rank)
    total = sum(records_per_rank)
    empty = [rank for rank, records in enumerate(records_per_rank) if records == 0]
    if empty:
        raise UserError(
            f"channel {channel!r} has {total} records, too few for {len(records_per_rank)} ranks (rank "
            f"{empty[0]} would get none); add records or run fewer ranks."
        )


def check_has_records(channel: str, records_per_rank: Sequence[int]) -> None:
    """An evaluation channel needs a record on some rank (ranks without records skip evaluating)."""
    if sum(records_per_rank) == 0:
        raise UserError(f"channel {channel!r} has no records; put data files in it or remove the channel.")
