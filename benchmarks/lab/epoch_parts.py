"""Where one of the managed trainer's epochs goes when its ranks train in lockstep, against the same
epochs read without training (payload/epoch_parts.py): figure 13's channel of small files, model and
global batch, no shuffle, 2 hosts, on the engines and ranks per host of ``--layout``. Prints one Markdown
row per layout (the slowest rank's median milliseconds of the epoch's start (metrics reset, iterator),
steps, metrics and whole epoch, each column its own slowest rank; of reading an epoch alone, the mean
of as many epochs read back to back; and read alone ÷ epoch, what the records/s of training comes to
against reading), each the median of ``--runs`` jobs, and writes the rows as JSON.

``python3 benchmarks/run.py lab epoch-parts [--files N] [--layout NAME ...] [--runs N] [--json PATH]
[--image IMAGE]``
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchlib.cluster import JobFailed, JobSpec, run_job
from benchlib.context import PAYLOAD, Context
from benchlib.labrun import run_lab_work
from figures.channel_scaling import HOSTS, SLOTS, data_root
from figures.small_files import KIND
from localcluster.dockercli import DockerCli

PARTS = ("start_ms", "steps_ms", "metrics_ms", "epoch_ms", "read_alone_ms")


@dataclass(frozen=True)
class Layout:
    """An engine and its ranks on each of the job's hosts, as the hyperparameters that choose them."""

    ranks_per_host: int
    hyperparameters: dict[str, object]


LAYOUTS = {
    "horovod, 2 ranks per host": Layout(  # figure 13's
        SLOTS, {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": SLOTS}
    ),
    "horovod, 1 rank per host": Layout(
        1, {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 1}
    ),
    "mwms, 1 worker per host": Layout(1, {"sagemaker_multi_worker_mirrored_strategy_enabled": True}),
}


def measure(ctx: Context, channel: Path, layout: Layout) -> dict[str, float]:
    """The slowest rank's median of each part, in milliseconds."""
    spec = JobSpec(
        image=ctx.image,
        hosts=HOSTS,
        code=PAYLOAD,
        program="epoch_parts.py",
        hyperparameters={
            "batch_size": KIND.batch_size,
            "shuffle_buffer": 0,
            "seed": 0,
            "image_shape": list(KIND.image_shape),
            **layout.hyperparameters,
        },
        channels={"train": channel},
        timeout_seconds=900,
    )
    job = run_job(ctx.created, spec, ctx.workdir).require_success()
    ranks = job.bench_fields("BENCH epoch_parts ")
    if len(ranks) != HOSTS * layout.ranks_per_host:
        raise JobFailed(f"{len(ranks)} ranks reported, not {HOSTS * layout.ranks_per_host}")
    return {part: max(float(rank[part]) for rank in ranks) for part in PARTS} | {
        "steps": float(ranks[0]["steps"])
    }


def row(name: str, parts: dict[str, float]) -> str:
    cells = " | ".join(f"{parts[part]:.0f}" for part in PARTS)
    return f"| {name} | {parts['steps']:.0f} | {cells} | {parts['read_alone_ms'] / parts['epoch_ms']:.2f} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py lab epoch-parts", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--files", type=int, default=1_000, choices=KIND.counts, help="the channel's files")
    parser.add_argument(
        "--layout", action="append", default=[], choices=list(LAYOUTS),
        help="measure only this layout (repeatable; default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--json", type=Path, default=Path("benchmarks/lab/epoch-parts.json"), help="results file"
    )
    parser.add_argument("--image", default="sagemaker-tf-horovod:cpu", help="the image under test")
    parser.add_argument("--runs", type=int, default=3, help="jobs per layout; each part's median is kept")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give at least 1")
    docker = DockerCli("docker")
    facts = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "image": args.image,
             "image_id": docker.image_id(args.image), "files": args.files}  # fmt: skip

    def work(ctx: Context) -> int:
        channel = data_root(ctx, [KIND]) / KIND.name / str(args.files)
        results: dict[str, dict[str, float]] = {}
        for name in args.layout or list(LAYOUTS):
            runs = [measure(ctx, channel, LAYOUTS[name]) for _ in range(args.runs)]
            results[name] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            ctx.say(f"[epoch-parts] {name}: {results[name]}")
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({**facts, "results": results}, indent=2) + "\n")
        print("| layout | steps per epoch | " + " | ".join(PARTS) + " | read alone ÷ epoch |")
        print("|---|---:|" + "---:|" * (len(PARTS) + 1))
        for name, parts in results.items():
            print(row(name, parts))
        return 0

    return run_lab_work(docker, args.image, args.runs, work)
