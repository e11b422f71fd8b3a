"""Where listing → first batch goes at figure 13's largest channel (100,000 small files, FullyReplicated),
phase by phase (payload/listing_phases.py): the managed trainer's own functions, with every rank listing
and with one listing per host (readers 0-1 and 2-3 as figure 13's 2 hosts), a plain tf.data script, and
the system calls the trainer adds on their own. One reader alone, then 4 at once in one container
(figure 13's 4 ranks on 2 cores). Prints a Markdown table (seconds per phase of the slowest reader, each
the median of ``--runs`` jobs; the trainer's totals over plain's; and the floor: plain's total plus the
system calls every rank's own listing adds, over plain's total) and writes it as JSON.

``python3 benchmarks/run.py lab listing-phases [--runs N] [--json PATH] [--image IMAGE]``
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from benchlib.cluster import JobFailed, JobSpec, field_values, run_job
from benchlib.context import PAYLOAD, Context
from benchlib.labrun import run_lab_work
from figures import small_files
from figures.channel_scaling import data_root
from localcluster.dockercli import DockerCli

FILES = 100_000
PROCESSES = (1, 4)
SIDES = ("trainer", "shared", "plain", "syscalls")

# (side, processes) → phase → seconds, of the reader whose phases add up to the most.
Phases = dict[tuple[str, int], dict[str, float]]


def _slowest_readers(lines: list[str]) -> Phases:
    by_reader: dict[tuple[str, int, str], dict[str, float]] = defaultdict(dict)
    for line in lines:
        text = line.split("BENCH phase ", 1)[1]
        name = text.split("name=", 1)[1].rsplit(" seconds=", 1)[0]
        values = field_values(text.replace(name, "_"))
        key = (values["side"], int(values["processes"]), values["reader"])
        by_reader[key][name] = float(values["seconds"])
    slowest: Phases = {}
    for (side, processes, _reader), phases in by_reader.items():
        if sum(phases.values()) > sum(slowest.get((side, processes), {}).values()):
            slowest[(side, processes)] = phases
    return slowest


def one_job(ctx: Context, channel: Path, sides: tuple[str, ...]) -> Phases:
    spec = JobSpec(
        image=ctx.image,
        hosts=1,
        code=PAYLOAD,
        program="listing_phases.py",
        hyperparameters={"processes": list(PROCESSES), "sides": ",".join(sides)},
        channels={"train": channel},
        timeout_seconds=900,
    )
    job = run_job(ctx.created, spec, ctx.workdir).require_success()
    phases = _slowest_readers([line.text for line in job.lines_with("BENCH phase ")])
    missing = [
        (side, processes) for side in sides for processes in PROCESSES if (side, processes) not in phases
    ]
    if missing:
        raise JobFailed(f"no phases printed for {missing}:\n{job.hosts[0].tail()}")
    return phases


def medians(runs: list[Phases]) -> Phases:
    return {
        key: {name: statistics.median(run[key][name] for run in runs) for name in runs[0][key]}
        for key in runs[0]
    }


def table(result: Phases) -> str:
    lines = [
        "| side | phase | "
        + " | ".join(f"{count} reader{'s' if count > 1 else ''}" for count in PROCESSES)
        + " |",
        "|---|---|" + "---:|" * len(PROCESSES),
    ]
    for side in SIDES:
        for name in result[(side, PROCESSES[0])]:
            cells = " | ".join(f"{result[(side, count)][name]:.3f} s" for count in PROCESSES)
            lines.append(f"| {side} | {name} | {cells} |")
    totals = {key: sum(phases.values()) for key, phases in result.items()}
    for label, value in (
        ("trainer ÷ plain", lambda count: totals[("trainer", count)] / totals[("plain", count)]),
        (
            "trainer, one listing per host ÷ plain",
            lambda count: totals[("shared", count)] / totals[("plain", count)],
        ),
        (
            "floor: (plain + the trainer's system calls) ÷ plain",
            lambda count: (totals[("plain", count)] + totals[("syscalls", count)]) / totals[("plain", count)],
        ),
    ):
        lines.append(f"| | {label} | " + " | ".join(f"{value(count):.2f}x" for count in PROCESSES) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py lab listing-phases", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--json", type=Path, default=Path("benchmarks/lab/listing-phases.json"), help="results file"
    )
    parser.add_argument("--image", default="sagemaker-tf-horovod:cpu", help="the image under test")
    parser.add_argument("--runs", type=int, default=3, help="jobs; each phase's median is kept")
    args = parser.parse_args(argv)
    docker = DockerCli("docker")
    facts = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "image": args.image,
             "image_id": docker.image_id(args.image), "files": FILES}  # fmt: skip

    def work(ctx: Context) -> int:
        channel = data_root(ctx, [small_files.KIND]) / small_files.KIND.name / str(FILES)
        runs = []
        for run in range(args.runs):
            # The sides take turns going first, so a machine that slows down or speeds up favours none.
            turn = run % len(SIDES)
            runs.append(one_job(ctx, channel, SIDES[turn:] + SIDES[:turn]))
            ctx.say(f"[listing phases] job {run + 1} of {args.runs} done")
        result = medians(runs)
        document = {**facts, "runs": args.runs,
                    "phases": [{"side": side, "processes": count, "seconds": phases}
                               for (side, count), phases in sorted(result.items())]}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(table(result))
        return 0

    return run_lab_work(docker, args.image, args.runs, work)
