"""``python -m sagetrain plan [--root DIR] [--gpus N] [--cpus N]`` prints the plan as JSON and runs
nothing; ``python -m sagetrain train`` runs this host's part of the job (what ``train`` in the image does)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sagetrain import contracts
from sagetrain.config.paths import root_from_environ
from sagetrain.engines import load
from sagetrain.errors import SagetrainError
from sagetrain.preparation import Preparation, launch_spec, prepare_job
from sagetrain.redact import Redactor

if TYPE_CHECKING:
    from sagetrain.launch.spec import JobSpec


def describe_plan(spec: JobSpec, environ: dict[str, str]) -> dict[str, Any]:
    """The plan as JSON: what runs where, the launch command and the environment the job adds to this
    process's, built by the same functions the job uses (the engine's own ``describe``)."""
    plan = spec.plan
    notes = [
        f"the interface is {plan.interface} if it exists on the host at start, else the one that routes "
        "to the master",
    ]
    if not plan.multi_host:
        notes.append(f"port 0 in {contracts.COORDINATOR_VAR} is a free port chosen at start")
    return {
        "engine": plan.engine.value,
        "role": plan.role.value,
        "hosts": list(plan.hosts),
        "master": plan.master,
        "current_host": plan.current_host,
        "processes_per_host": {host: plan.processes_on(host) for host in plan.hosts},
        "total_processes": plan.total_processes,
        "interface": plan.interface,
        "notes": notes,
        "reasons": list(plan.reasons),
        "program": {
            "name": spec.program.name,
            "kind": spec.program.kind.value,
            "why": spec.program.why,
            **({"near_miss": spec.program.near_miss} if spec.program.near_miss else {}),
        },
        "launch": load(plan.engine.entry.launcher).describe(spec, environ),
    }


def plan_command(
    root: Path,
    gpus: int | None,
    cpus: int | None = None,
    learn_secrets: Callable[[Redactor], None] = lambda redactor: None,
) -> dict[str, Any]:
    """The plan as JSON. Writes nothing: not under the root, not to this process's environment.
    ``learn_secrets``: as ``prepare_job``'s, for what is said about a job that cannot be planned."""
    environ = dict(os.environ)
    job = prepare_job(
        environ, Preparation.DESCRIBE, root=root, gpus=gpus, cpus=cpus, learn_secrets=learn_secrets
    )
    spec = launch_spec(job, environ, Preparation.DESCRIBE, cpus=cpus)
    description: dict[str, Any] = job.secrets.redactor.structure(describe_plan(spec, environ))
    return description


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sagetrain", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    plan_parser = commands.add_parser("plan", help="print the plan as JSON; runs nothing")
    plan_parser.add_argument(
        "--root", type=Path, default=None, help="job root (default: $SAGEMAKER_BASE_DIR or /opt/ml)"
    )
    plan_parser.add_argument("--gpus", type=int, default=None, help="plan as if every host had N GPUs")
    plan_parser.add_argument("--cpus", type=int, default=None, help="plan as if every host had N CPUs")
    commands.add_parser("train", help="run this host's part of the job")
    args = parser.parse_args(argv)
    if args.command == "train":
        from sagetrain.entry import main as train_main

        train_main()
    root = args.root or root_from_environ(os.environ)
    known: list[Redactor] = [Redactor()]
    try:
        description = plan_command(root, args.gpus, args.cpus, learn_secrets=known.append)
    except SagetrainError as error:
        print(f"sagetrain plan: {known[-1](error.cause)}", file=sys.stderr)
        raise SystemExit(error.exit_code) from None
    json.dump(description, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
