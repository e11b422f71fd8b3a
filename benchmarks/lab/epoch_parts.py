"""Where one of the managed trainer's epochs goes when its ranks train in lockstep, against the same
epochs read without training (payload/epoch_parts.py): figure 13's channel of small files (``--kind
large``: figure 14's of 1 MiB files), its model and global batch, no shuffle, 2 hosts, on the engines and
ranks per host of ``--layout``. Prints one Markdown row per layout (the slowest rank's median
milliseconds of the epoch's start (metrics reset, iterator), steps, metrics and whole epoch, each column
its own slowest rank; of reading an epoch alone, the mean of as many epochs read back to back; the
slowest epoch of any rank; and read alone ÷ epoch, what the records/s of training comes to against
reading), each the median of ``--runs`` jobs, and writes the rows as JSON.

``python3 benchmarks/run.py lab epoch-parts [--kind small|large] [--files N] [--layout NAME ...]
[--runs N] [--json PATH] [--image IMAGE] [--env NAME=VALUE ...]``
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
from benchlib.labrun import add_env_option, env_settings, run_lab_work
from figures import large_files, small_files
from figures.channel_scaling import HOSTS, SLOTS, ChannelKind, data_root
from localcluster.dockercli import DockerCli

PARTS = ("start_ms", "steps_ms", "metrics_ms", "epoch_ms", "read_alone_ms", "slowest_epoch_ms")


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


@dataclass(frozen=True)
class KindDefaults:
    """A channel kind of the lab: figure 13's or 14's, its files unless ``--files`` says, its results file
    unless ``--json`` says."""

    kind: ChannelKind
    files: int
    results_file: Path


KINDS = {
    "small": KindDefaults(small_files.KIND, 1_000, Path("benchmarks/lab/epoch-parts.json")),
    "large": KindDefaults(large_files.KIND, 100, Path("benchmarks/lab/epoch-parts-large.json")),
}


def measure(
    ctx: Context, kind: ChannelKind, channel: Path, layout: Layout, env: dict[str, str]
) -> dict[str, float]:
    """The slowest rank's median of each part, in milliseconds (``slowest_epoch_ms``: the slowest rank's
    slowest epoch)."""
    spec = JobSpec(
        image=ctx.image,
        hosts=HOSTS,
        code=PAYLOAD,
        program="epoch_parts.py",
        hyperparameters={
            "batch_size": kind.batch_size,
            "shuffle_buffer": 0,
            "seed": 0,
            "image_shape": list(kind.image_shape),
            **layout.hyperparameters,
        },
        channels={"train": channel},
        env=env,
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
    parser.add_argument("--kind", default="small", choices=list(KINDS), help="figure 13's or 14's channel")
    file_defaults = "; ".join(f"{defaults.files:,} for {name}" for name, defaults in KINDS.items())
    parser.add_argument("--files", type=int, help=f"the channel's files (default: {file_defaults})")
    parser.add_argument(
        "--layout", action="append", default=[], choices=list(LAYOUTS),
        help="measure only this layout (repeatable; default: all)",
    )  # fmt: skip
    json_defaults = "; ".join(f"{defaults.results_file} for {name}" for name, defaults in KINDS.items())
    parser.add_argument("--json", type=Path, help=f"results file (default: {json_defaults})")
    parser.add_argument("--image", default="sagemaker-tf-horovod:cpu", help="the image under test")
    parser.add_argument("--runs", type=int, default=3, help="jobs per layout; each part's median is kept")
    add_env_option(parser)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give at least 1")
    defaults = KINDS[args.kind]
    kind, results_file = defaults.kind, args.json or defaults.results_file
    files = args.files if args.files is not None else defaults.files
    env = env_settings(parser, args.env)
    if files not in kind.counts:
        parser.error(f"--files {files}: the {args.kind} channel has {', '.join(map(str, kind.counts))} files")
    docker = DockerCli("docker")
    facts = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "image": args.image,
             "image_id": docker.image_id(args.image), "kind": args.kind, "files": files,
             "env": env}  # fmt: skip

    def work(ctx: Context) -> int:
        channel = data_root(ctx, [kind]) / kind.name / str(files)
        results: dict[str, dict[str, float]] = {}
        for name in args.layout or list(LAYOUTS):
            runs = [measure(ctx, kind, channel, LAYOUTS[name], env) for _ in range(args.runs)]
            results[name] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            ctx.say(f"[epoch-parts] {name}: {results[name]}")
            results_file.parent.mkdir(parents=True, exist_ok=True)
            results_file.write_text(json.dumps({**facts, "results": results}, indent=2) + "\n")
        print("| layout | steps per epoch | " + " | ".join(PARTS) + " | read alone ÷ epoch |")
        print("|---|---:|" + "---:|" * (len(PARTS) + 1))
        for name, parts in results.items():
            print(row(name, parts))
        return 0

    return run_lab_work(docker, args.image, args.runs, work)
