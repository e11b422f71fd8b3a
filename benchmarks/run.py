#!/usr/bin/env python3
"""Benchmarks, side by side on this machine: our image vs what a user would otherwise use.

Prints one table of ratios (ours / theirs: median of paired runs, alternating A/B, with min and max)
and writes the same as JSON, and the scaling figures' plots as PNG. Needs Python 3 and Docker (and, once,
PyPI: its own environment for the plots, benchmarks/.venv); builds the AWS-toolkit comparison image
on first use (kept tagged for reuse). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib.bench_env import run_in_bench_env

run_in_bench_env(__file__)

from benchlib.cluster import JobFailed  # noqa: E402 (after the launcher check)
from benchlib.context import Context  # noqa: E402 (after the launcher check)
from benchlib.report import Row, format_table, markdown_table, summarise, summary_document  # noqa: E402 (after the launcher check)
from benchlib.stopping import until_stopped  # noqa: E402 (after the launcher check)
from figures import FIGURES  # noqa: E402 (after the launcher check)
from localcluster.dockercli import DockerCli, DockerError  # noqa: E402 (after the launcher check)

EPILOG = (
    "figures:\n"
    + "\n".join(f"  {number}  {module.TITLE}" for number, module in FIGURES.items())
    + """

examples:
  python3 benchmarks/run.py                       # every figure, 5 paired runs each
  python3 benchmarks/run.py --runs 1 --only 1,4   # a quick look at two figures

exit status: 0 all asked figures measured (targets missed are reported, not failed), 1 a figure could
  not be measured, 128+N stopped by signal N; bad flags: 2."""
)


def parse_figures(text: str) -> list[int]:
    try:
        numbers = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"--only takes figure numbers like 1,4,7, got {text!r}") from error
    unknown = [number for number in numbers if number not in FIGURES]
    if unknown or not numbers:
        raise argparse.ArgumentTypeError(f"--only: no figure {unknown or text!r}; figures: {sorted(FIGURES)}")
    return numbers


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--runs must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=positive, default=5, help="paired runs per figure (default 5)")
    parser.add_argument("--only", type=parse_figures, default=sorted(FIGURES), help="figures, e.g. 1,4,7")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results.json"), help="results file")
    parser.add_argument("--image", default="sagemaker-tf-horovod:cpu", help="our image under test")
    parser.add_argument("--gpu-image", default="sagemaker-tf-horovod:gpu", help="GPU image, for sizes only")
    parser.add_argument(
        "--aws-image", default="sagemaker-tf-horovod:cpu-awstoolkit", help="tag of the comparison image"
    )
    parser.add_argument(
        "--rebuild-aws-image", action="store_true", help="rebuild the comparison image even if current"
    )
    parser.add_argument(
        "--remove-aws-image", action="store_true", help="remove the comparison image at the end"
    )
    parser.add_argument("--docker", default="docker", help="docker CLI (default: docker on PATH)")
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="RESULTS_JSON",
        help="print a results file as a Markdown table; run nothing",
    )
    return parser


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as `uptime` shows them: a shared machine says so."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def machine_facts(docker: DockerCli, image: str) -> dict[str, object]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    memory_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{cpu}, {len(os.sched_getaffinity(0))} cores, {memory_kb / 2**20:.0f} GiB",
        "kernel": platform.release(),
        "docker_server": docker.run(["version", "--format", "{{.Server.Version}}"], check=False).strip(),
        "image": image,
        "image_id": docker.image_id(image),
        "load_at_start": load_average(),
    }


def write_results(
    path: Path, ctx: Context, runs: int, began: float, rows: list[Row], failures: list[str]
) -> None:
    document = {
        **ctx.facts,
        "runs": runs,
        "seconds": round(time.monotonic() - began, 1),
        "figures": [summary_document(summarise(row)) for row in rows],
        "not_measured": failures,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


# Experiments behind a figure (benchmarks/lab/), run as `run.py lab NAME [ARGS...]`: in the benchmarks'
# environment, with benchlib and figures importable as here.
LABS = {
    "epoch-parts": "lab.epoch_parts",
    "listing-phases": "lab.listing_phases",
    "mwms-variants": "lab.mwms_variants",
    "trainer-profile": "lab.trainer_profile",
}


def run_lab(argv: list[str]) -> int:
    if not argv or argv[0] not in LABS:
        print(f"usage: benchmarks/run.py lab {{{','.join(LABS)}}} [ARGS...]", file=sys.stderr)
        return 2
    lab: Any = importlib.import_module(LABS[argv[0]])
    return int(lab.main(argv[1:]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run_lab(argv[1:]) if argv[:1] == ["lab"] else run_figures(argv)


def run_figures(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.markdown is not None:
        results = json.loads(args.markdown.read_text())
        print(f"{results['date']}, {results['machine']}, {results['runs']} paired runs\n")
        print(markdown_table(results["figures"]))
        return 0
    docker = DockerCli(args.docker)

    rows: list[Row] = []
    failures: list[str] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sagetrain-bench-") as scratch:
        ctx = Context(docker, args.image, args.aws_image, args.gpu_image, Path(scratch), args.runs,
                      rebuild_aws_image=args.rebuild_aws_image,
                      plots_dir=args.json.parent / "plots")  # fmt: skip

        def measure_figures() -> int:
            if docker.image_id(args.image) is None:
                missing = f"benchmarks: image {args.image} does not exist; build it: scripts/build.sh cpu"
                print(missing, file=sys.stderr)
                return 1
            ctx.facts.update(machine_facts(docker, args.image))
            for number in args.only:
                module = FIGURES[number]
                ctx.say(f"figure {number}: {module.TITLE}")
                try:
                    rows.extend(module.samples(ctx))
                except (JobFailed, DockerError) as error:
                    failures.append(f"figure {number}: {error}")
                    ctx.say(f"figure {number} could not be measured: {error}")
                # After every figure: a long run stopped half-way keeps what it measured.
                write_results(args.json, ctx, args.runs, began, rows, failures)
                ctx.say(f"figure {number} done after {time.monotonic() - began:.0f} s")
            return 0

        def remove_what_was_created() -> None:
            ctx.created.remove_all()
            if args.remove_aws_image:
                docker.run(["image", "rm", args.aws_image], check=False)

        code = until_stopped(measure_figures, remove_what_was_created, ctx.say, "the benchmarks")
        if code:
            return code
    ctx.facts["load_at_end"] = load_average()
    summaries = [summarise(row) for row in rows]
    print()
    print(f"{ctx.facts.get('date')}  {ctx.facts.get('machine')}  image {args.image}  runs {args.runs}")
    print(f"load average at start {ctx.facts.get('load_at_start')}, at end {ctx.facts['load_at_end']}")
    print(format_table(summaries))
    for failure in failures:
        print(f"NOT MEASURED: {failure}")
    write_results(args.json, ctx, args.runs, began, rows, failures)
    print(f"\nbenchmarks: results written to {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
