"""How a lab (benchmarks/lab/) runs its jobs: on a Context over a scratch folder, with every container and
network it created removed on every way out, Ctrl-C and SIGTERM included."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
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
