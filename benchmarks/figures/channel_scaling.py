"""Figures 13 and 14 (not a figure itself): one channel of many TFRecord files, read by 4 ranks on 2
simulated hosts through the managed trainer, against a plain tf.data read of the same files in the same
containers, for each file count and S3DistributionType.

One job per (file count, distribution, run): every host's container runs payload/channel_job.py, which
runs the image's ``train`` (the managed trainer on payload/channel_model.py, Horovod, 2 ranks per host),
the plain readers (payload/plain_channel_read.py, one process per rank slot, each reading the share of
files a user would give that rank) and the trainer's input path without training
(payload/input_path_read.py, one process per rank slot, each preparing and reading its rank's share with
the trainer's own functions, no model step, no collective), in an order that flips from run to run. The
third side tells the input path's cost from training's: the trainer's ranks train in lockstep, the
readers only read. Measured per side:

- start → first batch: seconds from the rank's own process start to its first batch reaching the model
  (the trainer: the probe layer's first eager call, after listing, sharding and counting the channel; the
  plain reader: its first batch); the slowest of the 4 ranks counts, as the job waits for it.
- listing memory: peak RSS growth from just before the channel is listed to the first batch (the peak is
  reset there through /proc/self/clear_refs); the largest of the 4 ranks. Also the absolute peak RSS.
- records/s: all ranks together. The trainer: records of the channel per epoch over the time between
  rank 0's epoch lines (epochs after the first, which traces the step); the readers (plain and input
  path): the records of every reader's timed passes (as many as the trainer's timed epochs) over the time
  the slowest reader took for its passes. A side's readers start their timed passes together, once every
  one of them has made its first pass (payload/start_together.py), as the trainer's ranks run their
  epochs together; freely running readers, each timing its own passes, would time some passes beside
  readers still starting up and others alone.

Exactly-once is checked on both sides: the trainer counts every rank's records itself (no
steps_per_epoch cap, so every epoch reads them all) and its total must equal the records written; each
kind of reader's records must add up to the same total in every pass.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchlib.cluster import JobFailed, JobRun, JobSpec, LogLine, run_job
from benchlib.context import PAYLOAD, Context, alternating
from benchlib.plots import Point, scaling_plot
from benchlib.report import NO_TARGET, Row, Target, TargetKind
from sagetrain.deadline import Deadline

HOSTS = 2
SLOTS = 2  # ranks per host
RANKS = HOSTS * SLOTS
PROCESSES_PER_HOST = "sagemaker_mpi_num_of_processes_per_host"  # the hyperparameter giving SLOTS
DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
FIRST_BATCH_TARGET_S = 5.0
LISTING_TARGET_MB = 200.0
RATE_TARGET = 0.9
DATA_SECONDS = 1200.0
JOB_SECONDS = 900.0
STEPS = ("trainer", "plain", "input")  # channel_job.py's steps; the order flips from run to run
START_TOGETHER = "/bench-start-together"  # where every host's container mounts the readers' barrier folder
TOTAL_RECORDS = re.compile(r"(\d+) rank\(s\), (\d+) training records, (\d+) steps per epoch")


@dataclass(frozen=True)
class ChannelKind:
    """One figure's channel: files of ``records_per_file`` images of ``image_shape`` (uint8), at each of
    ``counts`` files; ``runs_cap`` bounds the paired runs per count (the largest counts take longest)."""

    number: int
    name: str
    counts: tuple[int, ...]
    records_per_file: int
    image_shape: tuple[int, int, int]
    batch_size: int  # global, over all ranks
    timed_epochs: Callable[[int], int]
    runs_cap: Callable[[int], int]

    def records(self, count: int) -> int:
        return count * self.records_per_file

    def file_bytes(self) -> int:
        height, width, depth = self.image_shape
        return self.records_per_file * height * width * depth


@dataclass(frozen=True)
class Side:
    """One side's numbers from one job: the slowest rank's start → first batch, the largest peak growth
    from listing to first batch and peak RSS, and all ranks' records/s together."""

    first_batch_s: float
    listing_s: float
    listing_mb: float
    peak_mb: float
    records_per_s: float
    step_ms: float = 0.0  # the trainer's: one synchronous step of all ranks (plain readers have none)


MEASURES = (
    ("start -> first batch", "s", "first_batch_s", Target(TargetKind.OURS_AT_MOST, FIRST_BATCH_TARGET_S)),
    ("listing -> first batch", "s", "listing_s", NO_TARGET),
    ("listing -> first batch, peak RSS growth", "MB", "listing_mb",
     Target(TargetKind.OURS_AT_MOST, LISTING_TARGET_MB)),
    ("peak RSS at first batch", "MB", "peak_mb", NO_TARGET),
    ("records/s, 4 ranks", "records/s", "records_per_s", Target(TargetKind.RATIO_AT_LEAST, RATE_TARGET)),
)  # fmt: skip
# The input path without training against the plain readers (rows and plots of its own).
INPUT_PATH_MEASURES = (
    ("records/s, 4 ranks, the trainer's input path without training", "records/s", "records_per_s",
     Target(TargetKind.RATIO_AT_LEAST, RATE_TARGET)),
)  # fmt: skip


def data_root(ctx: Context, kinds: Sequence[ChannelKind]) -> Path:
    """The channels of ``kinds``, written once into the system's temp folder and reused by later runs
    (100,000 files take a while); the folder's name is a digest of what it holds."""
    spec = {
        kind.name: {
            "counts": list(kind.counts),
            "records_per_file": kind.records_per_file,
            "image_shape": list(kind.image_shape),
        }
        for kind in kinds
    }
    text = json.dumps(spec, sort_keys=True)
    root = (
        Path(tempfile.gettempdir())
        / f"sagetrain-bench-channels-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    )
    if (root / "complete").exists() and (root / "complete").read_text() == text:
        return root
    # Figures 13, 14 and 18 each write their own channel here (figure 19 uses figure 14's): the messages
    # name whose it is.
    numbers = sorted({kind.number for kind in kinds})
    whose = f"figure{'s' if len(numbers) > 1 else ''} {', '.join(str(number) for number in numbers)}"
    ctx.say(f"writing the channels of {whose} into {root} (once; reused by later runs)")
    root.mkdir(parents=True, exist_ok=True)
    ctx.created.run_container(
        f"sagetrain-bench-{secrets.token_hex(3)}",
        ["--network", "none", "--entrypoint", "python",
         "--mount", f"type=bind,source={PAYLOAD},target=/payload,readonly",
         "--mount", f"type=bind,source={root},target=/data",
         ctx.image, "/payload/make_channel_data.py", "/data", text],
        Deadline(DATA_SECONDS, f"the channels of {whose} to be written",
                 "raise DATA_SECONDS in figures/channel_scaling.py"),
    )  # fmt: skip
    return root


def job_hyperparameters(kind: ChannelKind, epochs: int) -> dict[str, object]:
    """The figures' job on a ``kind`` channel: ``epochs`` epochs, no shuffle, no checkpoints, Horovod with
    ``SLOTS`` ranks per host (figure 19 gives the plain Horovod script the same)."""
    return {
        "epochs": epochs,
        "batch_size": kind.batch_size,
        "shuffle_buffer": 0,  # no side shuffles: the plain readers and the script read in order too
        "seed": 0,
        "checkpoint_every_epochs": 0,
        "image_shape": list(kind.image_shape),
        "sagemaker_mpi_enabled": True,
        PROCESSES_PER_HOST: SLOTS,
    }


def _job_spec(
    ctx: Context, kind: ChannelKind, data: Path, sharded: bool, steps_forward: bool, epochs: int
) -> JobSpec:
    start_together = ctx.workdir / f"start-together-{secrets.token_hex(3)}"
    start_together.mkdir()
    plan = {
        "order": list(STEPS if steps_forward else reversed(STEPS)),
        "start_together": START_TOGETHER,
        "slots": SLOTS,
        "sharded": sharded,
        "batch": kind.batch_size // RANKS,
        "passes": epochs - 1,
        "image_shape": list(kind.image_shape),
    }
    return JobSpec(
        image=ctx.image,
        hosts=HOSTS,
        code=PAYLOAD,
        program="channel_model.py",
        hyperparameters=job_hyperparameters(kind, epochs),
        channels={"train": data},
        sharded=("train",) if sharded else (),
        command=("python", "/opt/ml/code/channel_job.py", json.dumps(plan)),
        shared={START_TOGETHER: start_together},
        timeout_seconds=JOB_SECONDS,
    )


def _first_batches(job: JobRun, impl: str) -> list[dict[str, str]]:
    lines = job.bench_fields(f"BENCH first_batch impl={impl} ")
    if len(lines) != RANKS:
        printed = "\n".join(f"    {line.text}" for line in job.lines_with("BENCH first_batch "))
        raise JobFailed(f"{impl}: {len(lines)} first-batch lines, not {RANKS}; the job printed:\n{printed}")
    return lines


def _side(first: list[dict[str, str]], rate: float, step_ms: float = 0.0) -> Side:
    return Side(
        first_batch_s=max(float(line["seconds"]) for line in first),
        listing_s=max(float(line["listing_s"]) for line in first),
        # A floor of 1 MB: below it the growth is noise, and the ratio ours/theirs needs no zero.
        listing_mb=max(1.0, *(float(line["listing_mb"]) for line in first)),
        peak_mb=max(float(line["peak_mb"]) for line in first),
        records_per_s=rate,
        step_ms=step_ms,
    )


def _trainer_rate(job: JobRun, records: int, epochs: int) -> tuple[float, float]:
    """All ranks' records/s from rank 0's epoch lines, after checking the trainer counted every record;
    and the milliseconds of one step."""
    totals = [TOTAL_RECORDS.search(line.text) for line in job.lines_with("training records")]
    counted = [int(match.group(2)) for match in totals if match]
    steps = [int(match.group(3)) for match in totals if match]
    if counted != [records]:
        raise JobFailed(f"trainer: counted {counted} training records, not [{records}] (exactly once)")
    ends: list[LogLine] = [line for line in job.hosts[0].log if re.search(r"\bepoch=\d+ ", line.text)]
    if len(ends) != epochs:
        raise JobFailed(f"trainer: {len(ends)} epoch lines on algo-1, not {epochs}:\n{job.hosts[0].tail()}")
    seconds = ends[-1].at - ends[0].at
    return records * (epochs - 1) / seconds, 1000 * seconds / ((epochs - 1) * steps[0])


def _readers_rate(job: JobRun, impl: str, records: int, passes: int) -> float:
    """The ``impl`` readers' records/s together: every record of their timed passes over the slowest
    reader's time for its passes (they start them together), after checking that their shares add up to
    every record once in every pass."""
    by_reader: dict[str, list[tuple[int, float]]] = {}
    for values in job.bench_fields(f"BENCH read impl={impl} "):
        by_reader.setdefault(values["reader"], []).append((int(values["records"]), float(values["seconds"])))
    # Checked before the passes are added up: a reader that died printed fewer of them.
    if len(by_reader) != RANKS or any(len(reads) != passes for reads in by_reader.values()):
        found = {reader: len(reads) for reader, reads in sorted(by_reader.items())}
        raise JobFailed(
            f"{impl}: expected {RANKS} readers x {passes} passes, found passes per reader {found}:\n"
            + "\n".join(host.tail() for host in job.hosts)
        )
    per_pass = [sum(reads[index][0] for reads in by_reader.values()) for index in range(passes)]
    if any(total != records for total in per_pass):
        raise JobFailed(f"{impl}: the readers read {per_pass} records per pass, not {records} (exactly once)")
    return records * passes / max(sum(seconds for _, seconds in reads) for reads in by_reader.values())


@dataclass(frozen=True)
class JobSides:
    """One job's sides: the managed trainer, the plain tf.data readers, and the trainer's input path read
    without training."""

    trainer: Side
    plain: Side
    input_path: Side


def measure(
    ctx: Context, kind: ChannelKind, data: Path, count: int, sharded: bool, steps_forward: bool
) -> JobSides:
    epochs = kind.timed_epochs(count) + 1
    spec = _job_spec(ctx, kind, data, sharded, steps_forward, epochs)
    job = run_job(ctx.created, spec, ctx.workdir).require_success()
    records = kind.records(count)
    return JobSides(
        trainer=_side(_first_batches(job, "trainer"), *_trainer_rate(job, records, epochs)),
        plain=_side(_first_batches(job, "plain"), _readers_rate(job, "plain", records, epochs - 1)),
        input_path=_side(_first_batches(job, "input"), _readers_rate(job, "input", records, epochs - 1)),
    )


def _describe(side: Side) -> str:
    return (
        f"first batch {side.first_batch_s:.2f} s (listing on: {side.listing_s:.2f} s, "
        f"{side.listing_mb:.0f} MB), "
        f"peak {side.peak_mb:.0f} MB, {side.records_per_s:,.0f} records/s"
        + (f" ({side.step_ms:.0f} ms per step)" if side.step_ms else "")
    )


Samples = dict[tuple[str, int], list[JobSides]]


def _sample_all(ctx: Context, kind: ChannelKind) -> Samples:
    data = data_root(ctx, [kind]) / kind.name
    samples: Samples = {}
    for count in kind.counts:
        for distribution in DISTRIBUTIONS:
            runs = min(ctx.runs, kind.runs_cap(count))
            for index, forward in alternating(runs):
                sharded = distribution != DISTRIBUTIONS[0]
                sides = measure(ctx, kind, data / str(count), count, sharded, forward)
                ctx.say(f"[{kind.number}] {count} files {distribution} run {index + 1}/{runs}: "
                        f"trainer {_describe(sides.trainer)}; plain {_describe(sides.plain)}; "
                        f"input path {_describe(sides.input_path)}")  # fmt: skip
                samples.setdefault((distribution, count), []).append(sides)
    return samples


# (side, label, measures) of each comparison the rows make against plain tf.data; and every side's label
# in the plots, which show all three.
COMPARED = (("trainer", "trainer", MEASURES), ("input_path", "trainer's input path", INPUT_PATH_MEASURES))
SIDE_LABELS = (("trainer", "trainer"), ("input_path", "trainer's input path"), ("plain", "plain tf.data"))


def _rows(kind: ChannelKind, title: str, samples: Samples) -> list[Row]:
    rows = []
    for (distribution, count), jobs in samples.items():
        note = (
            f"{count:,} files of {kind.records_per_file} records ({kind.file_bytes() / 1024:,.0f} KiB), "
            f"global batch {kind.batch_size}, {kind.timed_epochs(count)} timed epoch(s); {len(jobs)} run(s)"
        )
        for index, (side, label, (measure_name, unit, attribute, target)) in enumerate(
            (side, label, measure) for side, label, measures in COMPARED for measure in measures
        ):
            values = tuple(
                (getattr(getattr(job, side), attribute), getattr(job.plain, attribute)) for job in jobs
            )
            name = f"{title}, {distribution}, {count:,} files: {measure_name}"
            # The note describes the channel, the same for all its measures: printed once.
            row_note = note if index == 0 else ""
            rows.append(Row(kind.number, name, label, "plain tf.data", unit, values, target, row_note))
    return rows


def _series(samples: Samples, attribute: str) -> dict[str, list[Point]]:
    series: dict[str, list[Point]] = {}
    for (distribution, count), jobs in samples.items():
        for side, label in SIDE_LABELS:
            values = [getattr(getattr(job, side), attribute) for job in jobs]
            point = (float(count), statistics.median(values), min(values), max(values))
            series.setdefault(f"{label}, {distribution}", []).append(point)
    return series


def _plots(ctx: Context, kind: ChannelKind, title: str, samples: Samples) -> None:
    for measure_name, unit, attribute, target in MEASURES:
        path = ctx.plots_dir / f"figure-{kind.number}-{attribute.replace('_', '-')}.png"
        goal = f"; goal: {target.describe(unit)}" if target.kind is not TargetKind.NONE else ""
        scaling_plot(
            path, f"Figure {kind.number}: {title}", "files in the channel (log scale)",
            f"{measure_name} ({unit})", _series(samples, attribute), log_x=True, log_base=10,
            note=f"4 ranks on 2 hosts; median with min-max of the runs{goal}",
        )  # fmt: skip
        ctx.say(f"[{kind.number}] plot {path}")


def samples(ctx: Context, kind: ChannelKind, title: str) -> list[Row]:
    measured = _sample_all(ctx, kind)
    _plots(ctx, kind, title, measured)
    return _rows(kind, title, measured)
