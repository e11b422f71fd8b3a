"""Where a managed-trainer rank's time goes, stage by stage (payload/trainer_profile.py), on three
channels: many small files (10,000 files of 4 records, 28×28×1 images, 1.6 KiB per file), large files
(12 files of 1,250 records, 1 MiB each) and few files (2 files of 20,000 records). One job of 1 host per
channel, plus one of 2 hosts on the small files for what the engine's collectives add to a step. Prints
a table (seconds per stage, and records/s where a stage reads records) and writes the rows as JSON.

``python3 benchmarks/run.py lab trainer-profile [--json PATH] [--image IMAGE] [--runs N] [--column NAME]
[--env NAME=VALUE]``
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from benchlib.cluster import JobSpec, field_values, run_job
from benchlib.context import PAYLOAD, Context
from benchlib.labrun import add_env_option, env_settings, run_lab_work
from figures.channel_scaling import ChannelKind, data_root
from localcluster.dockercli import DockerCli

SHAPE = (28, 28, 1)  # payload/model_module.py's images
BATCH = 128  # per rank, as figures 5 and 9


def _kind(name: str, files: int, records_per_file: int) -> ChannelKind:
    return ChannelKind(0, name, (files,), records_per_file, SHAPE, BATCH, lambda _: 1, lambda _: 1)


KINDS = (_kind("small", 10_000, 4), _kind("large", 12, 1_250), _kind("few", 2, 20_000))
# The table's columns: (name, channel, hosts).
PLAN = [(f"{kind.name}, 1 host", kind, 1) for kind in KINDS] + [("small, 2 hosts", KINDS[0], 2)]


def profile(
    ctx: Context, root: Path, kind: ChannelKind, hosts: int, env: Mapping[str, str]
) -> dict[str, dict[str, float]]:
    """Stage → {seconds, records} on rank 0 (the slowest rank's seconds when there are several); ``env``
    goes into every host's container (and so, through mpirun, to every rank)."""
    spec = JobSpec(
        image=ctx.image,
        hosts=hosts,
        code=PAYLOAD,
        program="trainer_profile.py",
        hyperparameters={"batch_size": BATCH * hosts, "seed": 0, "shuffle_buffer": 10_000, "epochs": 1},
        channels={"train": root / kind.name / str(kind.counts[0])},
        env=env,
        timeout_seconds=1200,
    )
    job = run_job(ctx.created, spec, ctx.workdir).require_success()
    stages: dict[str, dict[str, float]] = defaultdict(lambda: {"seconds": 0.0, "records": 0.0})
    for line in job.lines_with("BENCH stage"):
        text = line.text.split("BENCH stage ", 1)[1]
        name = text.split("name=", 1)[1].rsplit(" seconds=", 1)[0]
        values = field_values(text.replace(name, "_"))
        stage = stages[name]
        stage["seconds"] = max(stage["seconds"], float(values["seconds"]))
        stage["records"] = float(values["records"])
    return dict(stages)


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    columns = list(results)
    names = list(dict.fromkeys(name for stages in results.values() for name in stages))
    lines = ["| stage | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for name in names:
        cells = []
        for column in columns:
            stage = results[column].get(name)
            if stage is None:
                cells.append("–")
                continue
            rate = (
                f" ({stage['records'] / stage['seconds']:,.0f}/s)"
                if stage["records"] and stage["seconds"]
                else ""
            )
            cells.append(f"{stage['seconds']:.3f} s{rate}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py lab trainer-profile", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--json", type=Path, default=Path("benchmarks/lab/trainer-profile.json"), help="results file"
    )
    parser.add_argument("--image", default="sagemaker-tf-horovod:cpu", help="the image under test")
    parser.add_argument("--runs", type=int, default=1, help="jobs per channel; the median is kept")
    add_env_option(parser)
    parser.add_argument(
        "--column", action="append", default=[], choices=[column for column, _, _ in PLAN],
        help="profile only this column (repeatable; default: all)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    env = env_settings(parser, args.env)

    docker = DockerCli("docker")
    facts = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "image": args.image,
             "image_id": docker.image_id(args.image), "env": env}  # fmt: skip

    def work(ctx: Context) -> int:
        root = data_root(ctx, KINDS)
        results: dict[str, dict[str, dict[str, float]]] = {}
        plan = [entry for entry in PLAN if not args.column or entry[0] in args.column]
        for column, kind, hosts in plan:
            runs = [profile(ctx, root, kind, hosts, env) for _ in range(args.runs)]
            results[column] = {
                name: {
                    "seconds": statistics.median(run[name]["seconds"] for run in runs),
                    "records": runs[0][name]["records"],
                }
                for name in runs[0]
            }
            ctx.say(f"[profile] {column}: {len(results[column])} stages")
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({**facts, "results": results}, indent=2) + "\n")
        print(table(results))
        return 0

    return run_lab_work(docker, args.image, args.runs, work)
