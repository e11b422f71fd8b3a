"""How a lab (benchmarks/lab/) runs its jobs: on a Context over a scratch folder, with every container and
network it created removed on every way out, Ctrl-C and SIGTERM included."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from localcluster.dockercli import DockerCli

from benchlib.context import Context
from benchlib.stopping import until_stopped


def run_lab_work(docker: DockerCli, image: str, runs: int, work: Callable[[Context], int]) -> int:
    """``work(ctx)``'s exit code, or 128 + the signal's number when Ctrl-C or SIGTERM stopped it (as run.py
    exits: ``until_stopped``); what it created is removed before this returns. A lab uses no comparison
    image (its Context has none)."""
    with tempfile.TemporaryDirectory(prefix="sagetrain-bench-") as scratch:
        ctx = Context(docker, image, "unused", "unused", Path(scratch), runs)
        return until_stopped(lambda: work(ctx), ctx.created.remove_all, ctx.say, "the lab")


def add_env_option(parser: argparse.ArgumentParser) -> None:
    """``--env NAME=VALUE`` (repeatable): set in every job's containers, and so on every rank."""
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE",
        help="an environment variable for every job's containers, e.g. HOROVOD_CYCLE_TIME=5 (repeatable)",
    )  # fmt: skip


def env_settings(parser: argparse.ArgumentParser, settings: Sequence[str]) -> dict[str, str]:
    """``--env``'s settings as a mapping; a setting without a name or an ``=`` is the parser's error."""
    env: dict[str, str] = {}
    for setting in settings:
        name, equals, value = setting.partition("=")
        if not name or not equals:
            parser.error(f"--env {setting!r}: give NAME=VALUE")
        env[name] = value
    return env
