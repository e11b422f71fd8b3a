#!/usr/bin/env python3
"""Where MultiWorkerMirroredStrategy's `fit` loses to Horovod's on figure 9's job: each variant runs
figure 9's MWMS job with a few more hyperparameters (payload/distributed_fit.py says what each does)
and is paired with figure 9's unchanged Horovod job, the order flipping pair by pair. The variants take
turns round by round, so drift on a shared machine spreads over all of them. Prints one Markdown row
per variant (samples/s, the ratio to Horovod, the time per step that MWMS adds, the 1-minute load
average at each pair's start) and writes every pair to a JSON file.

    python3 benchmarks/run.py lab mwms-variants --pairs 3
    python3 benchmarks/run.py lab mwms-variants --pairs 3 --only figure,local-results
    python3 benchmarks/run.py lab mwms-variants --collectives --only figure,per-value-results

With --keras-trainer FILE, every MWMS job runs FILE in place of the image's Keras TensorFlow trainer
(`keras/src/backend/tensorflow/trainer.py`, bind-mounted read-only): a changed Keras patch measured
without rebuilding the image. To make FILE from the image and a patch of container/keras/patches:

    docker run --rm --entrypoint cat sagemaker-tf-horovod:cpu \
        /opt/venv/lib/python3.11/site-packages/keras/src/backend/tensorflow/trainer.py > trainer.py
    patch trainer.py -R < (the patch as the image was built with it)
    patch trainer.py < (the changed patch)

With --collectives it times nothing: one 1-epoch MWMS job per variant prints the all-reduces TensorFlow
traced into each function of the job (payload's ``count_collectives``).

With --step-results BLOCKS it times one thing only, in one 2-host MWMS job (payload/step_results_bench.py):
averaging a step's results across the workers, the image's Keras (one collective per dtype; with
--keras-trainer, FILE's) against one collective per value, in BLOCKS alternating blocks of calls each;
prints the milliseconds per call of each way and writes them to benchmarks/lab/step-results.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib.cluster import JobFailed, JobSpec, run_job
from benchlib.context import DATA_RECORDS, PAYLOAD, Context
from benchlib.labrun import run_lab_work
from figures.mwms_vs_horovod import ENGINES, HYPERPARAMETERS, job_spec, samples_per_second
from localcluster.dockercli import DockerCli

KERAS_TRAINER = "/opt/venv/lib/python3.11/site-packages/keras/src/backend/tensorflow/trainer.py"
GLOBAL_BATCH = int(HYPERPARAMETERS["batch_size"])
STEPS_PER_EPOCH = math.ceil(DATA_RECORDS / GLOBAL_BATCH)  # what an epoch of the figure's job takes
VARIANTS: dict[str, dict[str, object]] = {
    "figure": {},  # figure 9's MWMS job as it is
    "ring": {"collective": "RING"},
    "pack-64k": {"bytes_per_pack": 64 * 1024},
    "timeout-60": {"collective_timeout": 60},
    "file-shard": {"auto_shard": "FILE"},
    "packed-results": {"step_results": "packed"},
    "local-results": {"step_results": "local"},
    "no-partial": {"steps_per_epoch": STEPS_PER_EPOCH},
    "local+no-partial": {"step_results": "local", "steps_per_epoch": STEPS_PER_EPOCH},
    "packed+no-partial": {"step_results": "packed", "steps_per_epoch": STEPS_PER_EPOCH},
    # The image's Keras before its patch 0002 packed a step's results: one collective per value.
    "per-value-results": {"step_results": "per-value"},
    "per-value+no-partial": {"step_results": "per-value", "steps_per_epoch": STEPS_PER_EPOCH},
    "no-agreement": {"partial_batches": False},
    "packed+no-agreement": {"step_results": "packed", "partial_batches": False},
    "no-partial-both": {"steps_per_epoch": STEPS_PER_EPOCH},
    "packed+no-partial-both": {"step_results": "packed", "steps_per_epoch": STEPS_PER_EPOCH},
    "spe-8": {"steps_per_execution": 8},
    "local+no-partial+spe-8": {
        "step_results": "local",
        "steps_per_epoch": STEPS_PER_EPOCH,
        "steps_per_execution": 8,
    },
}


# Variants that change figure 9's Horovod job too (the same input pipeline on both sides).
HOROVOD_VARIANTS: dict[str, dict[str, object]] = {
    "no-partial-both": {"steps_per_epoch": STEPS_PER_EPOCH},
    "packed+no-partial-both": {"steps_per_epoch": STEPS_PER_EPOCH},
}


def variant_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"--only: no variant {unknown or text!r}; variants: {', '.join(VARIANTS)}"
        )
    return names


def ms_per_step(samples_per_second: float) -> float:
    return 1000 * GLOBAL_BATCH / samples_per_second


def spread(values: list[float], digits: int = 0) -> str:
    return f"{statistics.median(values):,.{digits}f} [{min(values):,.{digits}f}..{max(values):,.{digits}f}]"


def table(pairs: list[dict[str, Any]], names: list[str]) -> str:
    lines = [
        "| variant | MWMS samples/s | Horovod samples/s | MWMS / Horovod | MWMS − Horovod, ms per step "
        "| load (1 min) | pairs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        mine = [pair for pair in pairs if pair["variant"] == name and "failed" not in pair]
        if not mine:
            continue
        mwms = [float(pair["mwms"]) for pair in mine]
        horovod = [float(pair["horovod"]) for pair in mine]
        ratios = [m / h for m, h in zip(mwms, horovod, strict=True)]
        extra = [ms_per_step(m) - ms_per_step(h) for m, h in zip(mwms, horovod, strict=True)]
        loads = [float(pair["load"]) for pair in mine]
        lines.append(
            f"| {name} | {spread(mwms)} | {spread(horovod)} | {spread(ratios, 2)} | {spread(extra, 1)} "
            f"| {spread(loads, 1)} | {len(mine)} |"
        )
    return "\n".join(lines)


def traced_collectives(ctx: Context, name: str, files: dict[str, Path]) -> str:
    spec = job_spec(ctx, "mwms", {**VARIANTS[name], "epochs": 1, "count_collectives": True}, files)
    job = run_job(ctx.created, spec, ctx.workdir).require_success()
    # The launcher prefixes each line of a rank's output with the rank ("[algo-1 rank 0] ").
    lines = job.hosts[0].lines_with("collectives=")
    return lines[-1].text.split("collectives=", 1)[1] if lines else f"(none printed)\n{job.hosts[0].tail()}"


def step_results_timing(ctx: Context, blocks: int, files: dict[str, Path]) -> dict[str, Any]:
    """Milliseconds per call of each way (payload/step_results_bench.py), every block, and each way's
    first results, which the payload checked agree."""
    spec = JobSpec(
        image=ctx.image,
        hosts=2,
        code=PAYLOAD,
        program="step_results_bench.py",
        hyperparameters={**ENGINES["mwms"], "blocks": blocks},
        files=files,
        timeout_seconds=900,
    )
    job = run_job(ctx.created, spec, ctx.workdir).require_success()
    checks = job.bench_fields("BENCH step_results_check ")
    if len(checks) != 1 or checks[0].get("agree") != "1":
        raise JobFailed(f"step results: the ways disagree, or no single check was printed: {checks}")
    by_way: dict[str, list[float]] = {}
    for fields in job.bench_fields("BENCH step_results "):
        by_way.setdefault(fields["way"], []).append(float(fields["ms"]))
    return {"ms_per_call": by_way, "first_results": json.loads(checks[0]["first_results"])}


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py lab mwms-variants", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--pairs", type=int, default=3, help="pairs per variant (default 3)")
    parser.add_argument(
        "--only", type=variant_names, default=list(VARIANTS), help="variants, e.g. figure,ring"
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="results file (default benchmarks/lab/mwms-variants.json, with --step-results "
        "benchmarks/lab/step-results.json)",
    )
    parser.add_argument("--image", default="sagemaker-tf-horovod:cpu", help="the image under test")
    parser.add_argument("--collectives", action="store_true", help="count traced all-reduces; time nothing")
    parser.add_argument("--keras-trainer", type=Path, help="a Keras TF trainer.py for the MWMS jobs")
    parser.add_argument(
        "--step-results", type=int, metavar="BLOCKS", help="time the step results' reduction alone"
    )
    parser.add_argument(
        "--table", type=Path, nargs="+", help="print the table of these pair files; run nothing"
    )
    return parser.parse_args(argv)


def run_pairs(
    ctx: Context, names: list[str], files: dict[str, Path], facts: dict[str, object], results_file: Path
) -> list[dict[str, object]]:
    """Each variant's MWMS job paired with Horovod's, round by round; the pairs file rewritten after each."""
    pairs: list[dict[str, object]] = []
    for round_index in range(ctx.runs):
        for index, name in enumerate(names):
            load = os.getloadavg()[0]
            order = ["mwms", "horovod"] if (round_index + index) % 2 == 0 else ["horovod", "mwms"]
            extra = {"mwms": (VARIANTS[name], files), "horovod": (HOROVOD_VARIANTS.get(name, {}), {})}
            try:
                measured = {engine: samples_per_second(ctx, engine, *extra[engine]) for engine in order}
            except JobFailed as error:
                failed = str(error).strip().splitlines()[-3:]
                pairs.append({"variant": name, "failed": failed})
                ctx.say(f"[{name}] pair {round_index + 1} failed: {' | '.join(failed)}")
                continue
            pairs.append({"variant": name, "first": order[0], "load": load, **measured})
            ratio = measured["mwms"] / measured["horovod"]
            ctx.say(
                f"[{name}] pair {round_index + 1}: MWMS {measured['mwms']:.0f}/s, Horovod "
                f"{measured['horovod']:.0f}/s ({ratio:.2f}), load {load:.2f}"
            )
            results_file.parent.mkdir(parents=True, exist_ok=True)
            results_file.write_text(json.dumps({**facts, "pairs": pairs}, indent=2) + "\n")
    return pairs


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.table:
        pairs_read = [pair for path in args.table for pair in json.loads(path.read_text())["pairs"]]
        print(table(pairs_read, list(dict.fromkeys(pair["variant"] for pair in pairs_read))))
        return 0

    results_file = args.json or Path(
        "benchmarks/lab/step-results.json" if args.step_results else "benchmarks/lab/mwms-variants.json"
    )
    docker = DockerCli("docker")
    files = {KERAS_TRAINER: args.keras_trainer} if args.keras_trainer else {}
    facts: dict[str, object] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "image": args.image,
        "image_id": docker.image_id(args.image),
        "keras_trainer": str(args.keras_trainer or ""),
    }
    if not args.step_results:
        facts["variants"] = {name: VARIANTS[name] for name in args.only}

    def work(ctx: Context) -> int:
        if args.step_results:
            timing = step_results_timing(ctx, args.step_results, files)
            results_file.write_text(json.dumps({**facts, "step_results": timing}, indent=2) + "\n")
            for way, milliseconds in timing["ms_per_call"].items():
                print(f"{way}: {spread(milliseconds, 3)} ms per call ({len(milliseconds)} blocks)")
        elif args.collectives:
            for name in args.only:
                print(f"{name}: {traced_collectives(ctx, name, files)}", flush=True)
        else:
            print(table(run_pairs(ctx, args.only, files, facts, results_file), args.only))
        return 0

    return run_lab_work(docker, args.image, args.pairs, work)
