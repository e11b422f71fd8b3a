"""Sharding arithmetic: which rank reads what, and how many steps an epoch has. Pure; tested with literals.

The rule (DESIGN.md, "Sharding rule"): every record of a channel is consumed by exactly one rank per
epoch. With at least as many files as shard members, whole files are dealt out, balanced by size;
otherwise every member reads all files and keeps every ``count``-th record starting at its index.

Equal steps on every rank: a synchronous step is a collective, so a rank with one batch more than the
others would wait forever. The trainer therefore runs ``steps = ceil(min(records per rank) / batch)``
steps on every rank, each of ``batch`` records except the last, which takes all the records the rank
has left. No record is dropped or repeated, no batch is empty; a rank whose shard is larger than the
smallest one folds its surplus into its last step (at most one record with record-level sharding).
Gradients are averaged per step across ranks, whatever each rank's batch size was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from sagetrain.errors import UserError


class ShardLevel(Enum):
    FILE = "file"
    RECORD = "record"


@dataclass(frozen=True)
class DataFile:
    """One unit of sharding: a path (or, for .npy pairs, the features file) and its size in bytes."""

    path: str
    size: int


@dataclass(frozen=True)
class ShardPlan:
    """What one member of a shard group reads.

    ``files`` are read in this order; with ``RECORD`` level the member keeps records whose position in
    that concatenation is ``record_index`` modulo ``record_count``.
    """

    level: ShardLevel
    files: tuple[DataFile, ...]
    record_index: int
    record_count: int


def balance_files(files: Sequence[DataFile], members: int) -> tuple[tuple[DataFile, ...], ...]:
    """Deal files to ``members`` bins, largest first, each to the lightest bin (fewest files, then lowest
    index on ties). Deterministic for a given listing; every bin gets a file when ``len(files) >= members``.
    Each bin keeps its files in path order so reads stay sequential."""
    if members < 1:
        raise ValueError(f"members must be at least 1, got {members}")
    bins: list[list[DataFile]] = [[] for _ in range(members)]
    totals = [0] * members
    for data_file in sorted(files, key=lambda item: (-item.size, item.path)):
        lightest = min(range(members), key=lambda index: (totals[index], len(bins[index]), index))
        bins[lightest].append(data_file)
        totals[lightest] += data_file.size
    return tuple(tuple(sorted(members_files, key=lambda item: item.path)) for members_files in bins)


def plan_shard(files: Sequence[DataFile], index: int, count: int) -> ShardPlan:
    """This member's share of a channel's files, for member ``index`` of ``count``."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1}")
    ordered = tuple(sorted(files, key=lambda item: item.path))
    if len(ordered) >= count:
        return ShardPlan(ShardLevel.FILE, balance_files(ordered, count)[index], 0, 1)
    return ShardPlan(ShardLevel.RECORD, ordered, index, count)


def records_in_record_shard(total: int, index: int, count: int) -> int:
    """How many of ``total`` records member ``index`` keeps when it takes every ``count``-th one."""
    return 0 if total <= index else (total - index - 1) // count + 1


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
    """The size of each of one rank's ``steps`` batches: full batches, then one last batch.

    ``take_all`` (no ``steps_per_epoch`` cap): the last batch takes every record left, so the batches
    cover exactly ``records``. Otherwise the last batch is at most ``batch_size`` and the records past it
    are not seen this epoch.
    """
    if steps < 1 or records < steps:
        raise ValueError(f"cannot split {records} records into {steps} non-empty batches")
    left = records - (steps - 1) * batch_size
    if left < 1:
        raise ValueError(f"{records} records do not fill {steps - 1} batches of {batch_size}")
    return (batch_size,) * (steps - 1) + (left if take_all else min(left, batch_size),)


def check_records_per_rank(channel: str, records_per_rank: Sequence[int]) -> None:
    """Fail alike on every rank when any rank would get no record of ``channel``."""
    total = sum(records_per_rank)
    if total == 0:
        raise UserError(f"channel {channel!r} has no records; put data files in it or remove the channel.")
    empty = [rank for rank, records in enumerate(records_per_rank) if records == 0]
    if empty:
        raise UserError(
            f"channel {channel!r} has {total} records, too few for {len(records_per_rank)} ranks (rank "
            f"{empty[0]} would get none); add records or run fewer ranks."
        )
