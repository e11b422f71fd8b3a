"""Figures 18 and 19 (not a figure itself): one training job on one channel, run by the managed trainer
and by the plain Horovod script a user would write instead (payload/plain_horovod_script.py), with the
same model, parser, layout, global batch and epochs, a pair of jobs at a time.

Measured per side, from each job:

- job wall time: Docker's StartedAt of the first container → FinishedAt of the last, what the user waits
  for (start-up, listing and sharding the channel, tracing, the epochs, the export, teardown);
- records/s: the job's records × (epochs - 1) over the time between rank 0's first and last epoch
  lines, by when Docker received them on algo-1, so start-up and the first epoch's tracing are out.

Exactly once: each trainer side must report the channel's records (its rank-count line), and the script's
ranks must have taken every file between them.

The sides' order rotates from pair to pair (each goes first, second, … in turn), so drift on a shared
machine falls on all alike. Ratios are trainer / script, per pair.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from benchlib.cluster import JobFailed, JobRun, JobSpec, field_values, run_job
from benchlib.context import PAYLOAD, Context
from benchlib.report import Row, Target, TargetKind

from figures.channel_scaling import PROCESSES_PER_HOST, TOTAL_RECORDS, ChannelKind, data_root

JOB_SECONDS = 900.0
WALL_TARGET = 1.1
RATE_TARGET = 0.9
EPOCH_LINE = re.compile(r"\bepoch=\d+ ")
SCRIPT = "script"  # the baseline side's key in every figure's sides


@dataclass(frozen=True)
class Side:
    label: str  # short, for the table's ours/theirs cells
    long_name: str  # for the rows' names
    program: str
    hyperparameters: Mapping[str, object] = field(default_factory=dict)
    managed: bool = True  # the managed trainer, which reports the records it will train on


# What the job's hyperparameters decide for every side, and the rows' note and the checks read from them.
JOB_KEYS = ("epochs", "batch_size", PROCESSES_PER_HOST)


@dataclass(frozen=True)
class PairedJob:
    """One figure's job: ``files`` files of ``channel`` (FullyReplicated) on ``hosts`` hosts;
    ``hyperparameters`` are every side's (epochs, global batch, ranks per host among them), each side adds
    its own. ``sides`` holds the trainer sides and the script (key ``SCRIPT``), in the first pair's order."""

    number: int
    channel: ChannelKind
    files: int
    hosts: int
    hyperparameters: Mapping[str, object]
    sides: Mapping[str, Side]
    max_pairs: int

    def __post_init__(self) -> None:
        # A mistake here should stop the figure before its first job, not after its last.
        problems = [
            f"side {name!r} sets {sorted(set(side.hyperparameters) & set(JOB_KEYS))}, which the job sets"
            for name, side in self.sides.items()
            if set(side.hyperparameters) & set(JOB_KEYS)
        ]
        if SCRIPT not in self.sides:
            problems.append(f"no {SCRIPT!r} side to compare with (sides: {sorted(self.sides)})")
        if self.files not in self.channel.counts:
            problems.append(f"the channel is written with {self.channel.counts} files, not {self.files}")
        for key in JOB_KEYS:
            try:
                self._whole_number(key)
            except ValueError as error:
                problems.append(str(error))
        if problems:
            raise ValueError(f"figure {self.number}: " + "; ".join(problems))

    def _whole_number(self, key: str) -> int:
        # Without the ranks-per-host key the image runs one rank per host.
        value = self.hyperparameters.get(key, 1 if key == PROCESSES_PER_HOST else None)
        if not isinstance(value, int):
            raise ValueError(f"hyperparameter {key!r} is {value!r}, not a whole number")
        return value

    @property
    def epochs(self) -> int:
        return self._whole_number("epochs")

    @property
    def batch_size(self) -> int:
        """Global, over all ranks."""
        return self._whole_number("batch_size")

    @property
    def ranks_per_host(self) -> int:
        return self._whole_number(PROCESSES_PER_HOST)

    @property
    def ranks(self) -> int:
        return self.hosts * self.ranks_per_host

    @property
    def records(self) -> int:
        return self.channel.records(self.files)

    @property
    def trainers(self) -> tuple[str, ...]:
        return tuple(name for name, side in self.sides.items() if side.managed)


@dataclass(frozen=True)
class Measured:
    wall_s: float
    records_per_s: float


def rotation(paired: PairedJob, index: int) -> list[str]:
    """The sides' order in pair ``index``: each goes first, second, … in turn."""
    order = list(paired.sides)
    shift = index % len(order)
    return order[shift:] + order[:shift]


def _check_trainer_records(paired: PairedJob, job: JobRun, name: str) -> None:
    totals = [TOTAL_RECORDS.search(line.text) for line in job.lines_with("training records")]
    counted = [int(match.group(2)) for match in totals if match]
    if counted != [paired.records]:
        raise JobFailed(f"{name}: counted {counted} training records, not [{paired.records}] (exactly once)")


def _check_script_files(paired: PairedJob, job: JobRun) -> None:
    shares = [field_values(line.text) for line in job.lines_with("plain_horovod rank=")]
    ranks = sorted(int(share["rank"]) for share in shares)
    files = sum(int(share["files"]) for share in shares)
    if ranks != list(range(paired.ranks)) or files != paired.files:
        raise JobFailed(
            f"plain script: ranks {ranks} took {files} files, not ranks {list(range(paired.ranks))} and "
            f"{paired.files} (exactly once):\n{job.hosts[0].tail()}"
        )


def _records_per_second(paired: PairedJob, job: JobRun, name: str) -> float:
    master = job.hosts[0]
    epochs = [line for line in master.log if EPOCH_LINE.search(line.text)]
    if len(epochs) != paired.epochs:
        raise JobFailed(f"{name}: {len(epochs)} epoch lines on algo-1, not {paired.epochs}:\n{master.tail()}")
    return paired.records * (paired.epochs - 1) / (epochs[-1].at - epochs[0].at)


def measure(ctx: Context, paired: PairedJob, side_name: str, channel: Path) -> Measured:
    side = paired.sides[side_name]
    spec = JobSpec(
        image=ctx.image,
        hosts=paired.hosts,
        code=PAYLOAD,
        program=side.program,
        hyperparameters={**paired.hyperparameters, **side.hyperparameters},
        channels={"train": channel},
        timeout_seconds=JOB_SECONDS,
    )
    job = run_job(ctx.created, spec, ctx.workdir).require_success()
    if side.managed:
        _check_trainer_records(paired, job, side.long_name)
    else:
        _check_script_files(paired, job)
    return Measured(job.wall_seconds, _records_per_second(paired, job, side.long_name))


def _measures(paired: PairedJob) -> tuple[tuple[str, str, str, Target], ...]:
    """(name, unit, Measured's attribute, target) of the figure's rows; each for every trainer side."""
    return (
        ("job wall time", "s", "wall_s", Target(TargetKind.RATIO_AT_MOST, WALL_TARGET)),
        (f"records/s over epochs 2-{paired.epochs}", "records/s", "records_per_s",
         Target(TargetKind.RATIO_AT_LEAST, RATE_TARGET)),
    )  # fmt: skip


def _rows(paired: PairedJob, pairs: list[dict[str, Measured]]) -> list[Row]:
    script = paired.sides[SCRIPT]
    channel = paired.channel
    note = (
        f"{paired.records:,} records in {paired.files:,} TFRecord files of {channel.records_per_file} "
        f"({channel.file_bytes() / 1024:,.0f} KiB), FullyReplicated; {paired.hosts} hosts x "
        f"{paired.ranks_per_host} rank(s), global batch {paired.batch_size}, {paired.epochs} epochs, "
        f"records/s over epochs 2-{paired.epochs}; {len(pairs)} pair(s), the sides' order rotating"
    )
    rows: list[Row] = []
    for measure_name, unit, attribute, target in _measures(paired):
        for trainer in paired.trainers:
            values = tuple(
                (getattr(pair[trainer], attribute), getattr(pair[SCRIPT], attribute)) for pair in pairs
            )
            side = paired.sides[trainer]
            name = f"{measure_name}: {side.long_name} vs {script.long_name}"
            # The note describes the job, the same for every row: printed once.
            row_note = "" if rows else note
            rows.append(Row(paired.number, name, side.label, script.label, unit, values, target, row_note))
    return rows


def samples(ctx: Context, paired: PairedJob) -> list[Row]:
    channel = data_root(ctx, [paired.channel]) / paired.channel.name / str(paired.files)
    count = min(ctx.runs, paired.max_pairs)
    pairs = []
    for index in range(count):
        measured: dict[str, Measured] = {}
        for side in rotation(paired, index):
            measured[side] = measure(ctx, paired, side, channel)
            # Each job as it ends: a side that fails later still leaves the others' numbers in the log.
            label = paired.sides[side].label
            ctx.say(
                f"[{paired.number}] pair {index + 1}/{count}: {label} {measured[side].wall_s:.1f} s, "
                f"{measured[side].records_per_s:,.0f} records/s"
            )
        pairs.append(measured)
    return _rows(paired, pairs)
