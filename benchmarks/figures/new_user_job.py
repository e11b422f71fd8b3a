"""Figure 18: a new user's job, paired. One 2-host training job (containers algo-1 and algo-2, one rank
per host), run three ways on the same channel:

- the managed trainer on Horovod: the image's ``train`` with payload/model_module.py as the program and no
  engine named (a model module on 2 hosts gets Horovod over MPI);
- the managed trainer on MultiWorkerMirroredStrategy: the same, with
  ``sagemaker_multi_worker_mirrored_strategy_enabled`` (as figure 10 sets it);
- the plain Horovod script a user would write instead (payload/plain_horovod_script.py): ``train`` runs it
  as a script on the MPI engine, with ``sagemaker_mpi_enabled`` as figure 9's Horovod side does.

The channel ``train`` (FullyReplicated): 40,000 records in 10,000 TFRecord files of 4, the 28×28×1 image
and int64 label model_module.parse_record reads, written once into the system's temp folder by figures
13-14's writer (figures/channel_scaling.py) and reused by later runs. Every side: the same model and
parser, global batch 128 (64 per rank), shuffle buffer 10,000, seed 0, 10 epochs. Each side as a new
user runs it: the trainer with its defaults (a checkpoint after every epoch, the model exported at the
end as a SavedModel and a .keras file), the script saving its model as a .keras file at the end (what
SageMaker uploads), as scripts do.

Measured per side, from each job:

- job wall time: Docker's StartedAt of the first container → FinishedAt of the last, what the user waits
  for (start-up, listing and sharding the channel, tracing, 10 epochs, the export, teardown);
- records/s: 40,000 × 9 records over the time between rank 0's epoch-1 and epoch-10 lines, by when Docker
  received them on algo-1, so start-up and the first epoch's tracing are out.

Exactly once: each trainer side must report 40,000 training records (its rank-count line), and the
script's ranks must have taken the 10,000 files between them.

A pair is one job of each side; the sides' order rotates from pair to pair (each goes first, second and
third in turn), so drift on a shared machine falls on all three alike. Ratios are trainer / script, per
pair. At most 3 pairs: each job takes minutes on 2 cores (ten epochs of 40,000 records).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from benchlib.cluster import JobFailed, JobRun, JobSpec, field_values, run_job
from benchlib.context import PAYLOAD, Context
from benchlib.report import Row, Target, TargetKind

from figures.channel_scaling import TOTAL_RECORDS, ChannelKind, data_root

NUMBER = 18
TITLE = "a new user's job, 2 hosts, 10 epochs: managed trainer (Horovod, MWMS) vs plain Horovod script"
FILES = 10_000
RECORDS_PER_FILE = 4
RECORDS = FILES * RECORDS_PER_FILE
EPOCHS = 10
GLOBAL_BATCH = 128  # as figure 9's: 64 per rank on 2 hosts
HOSTS = 2
MAX_PAIRS = 3
JOB_SECONDS = 900.0
WALL_TARGET = 1.1
RATE_TARGET = 0.9
EPOCH_LINE = re.compile(r"\bepoch=\d+ ")

# The figure's channel, in the terms of the channel writer figures 13 and 14 share (its own folder: the
# folder's name is a digest of the channel's shape).
CHANNEL = ChannelKind(
    number=NUMBER,
    name="new-user-job",
    counts=(FILES,),
    records_per_file=RECORDS_PER_FILE,
    image_shape=(28, 28, 1),  # model_module.IMAGE_SHAPE (the harness cannot import TensorFlow's side)
    batch_size=GLOBAL_BATCH,
    timed_epochs=lambda _count: EPOCHS - 1,
    runs_cap=lambda _count: MAX_PAIRS,
)
SHARED_HYPERPARAMETERS = {"epochs": EPOCHS, "batch_size": GLOBAL_BATCH, "shuffle_buffer": 10_000, "seed": 0}


@dataclass(frozen=True)
class Side:
    label: str  # short, for the table's ours/theirs cells
    long_name: str  # for the rows' names
    program: str
    hyperparameters: Mapping[str, object] = field(default_factory=dict)
    managed: bool = True  # the managed trainer, which reports the records it will train on


SIDES = {
    "horovod": Side("trainer, Horovod", "managed trainer on Horovod", "model_module.py"),
    "mwms": Side(
        "trainer, MWMS",
        "managed trainer on MultiWorkerMirroredStrategy",
        "model_module.py",
        {"sagemaker_multi_worker_mirrored_strategy_enabled": True},
    ),
    "script": Side(
        "plain Horovod script",
        "plain Horovod script",
        "plain_horovod_script.py",
        {"sagemaker_mpi_enabled": True},
        managed=False,
    ),
}
TRAINERS = ("horovod", "mwms")


@dataclass(frozen=True)
class Measured:
    wall_s: float
    records_per_s: float


def rotation(index: int) -> list[str]:
    """The sides' order in pair ``index``: each goes first, second and third in turn."""
    order = list(SIDES)
    shift = index % len(order)
    return order[shift:] + order[:shift]


def _check_trainer_records(job: JobRun, name: str) -> None:
    totals = [TOTAL_RECORDS.search(line.text) for line in job.lines_with("training records")]
    counted = [int(match.group(2)) for match in totals if match]
    if counted != [RECORDS]:
        raise JobFailed(f"{name}: counted {counted} training records, not [{RECORDS}] (exactly once)")


def _check_script_files(job: JobRun) -> None:
    shares = [field_values(line.text) for line in job.lines_with("plain_horovod rank=")]
    ranks = sorted(int(share["rank"]) for share in shares)
    files = sum(int(share["files"]) for share in shares)
    if ranks != list(range(HOSTS)) or files != FILES:
        raise JobFailed(
            f"plain script: ranks {ranks} took {files} files, not ranks {list(range(HOSTS))} and {FILES} "
            f"(exactly once):\n{job.hosts[0].tail()}"
        )


def _records_per_second(job: JobRun, name: str) -> float:
    master = job.hosts[0]
    epochs = [line for line in master.log if EPOCH_LINE.search(line.text)]
    if len(epochs) != EPOCHS:
        raise JobFailed(f"{name}: {len(epochs)} epoch lines on algo-1, not {EPOCHS}:\n{master.tail()}")
    return RECORDS * (EPOCHS - 1) / (epochs[-1].at - epochs[0].at)


def measure(ctx: Context, side_name: str, channel: Path) -> Measured:
    side = SIDES[side_name]
    spec = JobSpec(
        image=ctx.image,
        hosts=HOSTS,
        code=PAYLOAD,
        program=side.program,
        hyperparameters={**SHARED_HYPERPARAMETERS, **side.hyperparameters},
        channels={"train": channel},
        timeout_seconds=JOB_SECONDS,
    )
    job = run_job(ctx.created, spec, ctx.workdir).require_success()
    if side.managed:
        _check_trainer_records(job, side.long_name)
    else:
        _check_script_files(job)
    return Measured(job.wall_seconds, _records_per_second(job, side.long_name))


# (name, unit, Measured's attribute, target) of the figure's rows; each for both trainer sides.
MEASURES = (
    ("job wall time", "s", "wall_s", Target(TargetKind.RATIO_AT_MOST, WALL_TARGET)),
    (f"records/s over epochs 2-{EPOCHS}", "records/s", "records_per_s",
     Target(TargetKind.RATIO_AT_LEAST, RATE_TARGET)),
)  # fmt: skip


def _rows(pairs: list[dict[str, Measured]]) -> list[Row]:
    script = SIDES["script"]
    note = (
        f"{RECORDS:,} records in {FILES:,} TFRecord files, FullyReplicated; {HOSTS} hosts x 1 rank, global "
        f"batch {GLOBAL_BATCH}, {EPOCHS} epochs, records/s over epochs 2-{EPOCHS}; {len(pairs)} pair(s), "
        "the three sides' order rotating"
    )
    rows: list[Row] = []
    for measure_name, unit, attribute, target in MEASURES:
        for trainer in TRAINERS:
            values = tuple(
                (getattr(pair[trainer], attribute), getattr(pair["script"], attribute)) for pair in pairs
            )
            name = f"{measure_name}: {SIDES[trainer].long_name} vs {script.long_name}"
            # The note describes the job, the same for every row: printed once.
            row_note = "" if rows else note
            rows.append(Row(NUMBER, name, SIDES[trainer].label, script.label, unit, values, target, row_note))
    return rows


def _describe(side: str, measured: Measured) -> str:
    return f"{SIDES[side].label} {measured.wall_s:.1f} s, {measured.records_per_s:,.0f} records/s"


def samples(ctx: Context) -> list[Row]:
    channel = data_root(ctx, [CHANNEL]) / CHANNEL.name / str(FILES)
    count = min(ctx.runs, MAX_PAIRS)
    pairs = []
    for index in range(count):
        measured: dict[str, Measured] = {}
        for side in rotation(index):
            measured[side] = measure(ctx, side, channel)
            # Each job as it ends: a side that fails later still leaves the others' numbers in the log.
            ctx.say(f"[{NUMBER}] pair {index + 1}/{count}: {_describe(side, measured[side])}")
        pairs.append(measured)
    return _rows(pairs)
