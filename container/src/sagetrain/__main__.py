"""``python -m sagetrain plan [--root DIR] [--gpus N] [--cpus N]`` prints the plan as JSON and runs
nothing; ``python -m sagetrain train`` runs this host's part of the job (what ``train`` in the image does)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from sagetrain.config import load_job_config, root_from_environ
from sagetrain.config.devices import detect_devices
from sagetrain.errors import SagetrainError
from sagetrain.launch.job import JobSpec, coordinator_address
from sagetrain.plan import Engine, make_plan
from sagetrain.run.program import Program, ProgramKind, classify_program

# Shown where the job puts the port it binds at start (one host: any free loopback port).
PORT_CHOSEN_AT_START = 0


def _program_for_plan(name: str | None, code_dir: Path) -> Program:
    """The program as it would be classified; a plain script when the code is not here to look at."""
    try:
        return classify_program(name, code_dir)
    except SagetrainError:
        script = code_dir / (name or "<sagemaker_program>")
        return Program(ProgramKind.PYTHON_SCRIPT, name or "<sagemaker_program>", script, code_dir)


def _added(env: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in sorted(env.items()) if environ.get(name) != value}


def describe_plan(spec: JobSpec, environ: dict[str, str]) -> dict[str, Any]:
    """The plan as JSON: what runs where, the launch command and the environment the job adds to this
    process's, built by the same functions the job uses."""
    from sagetrain.launch.mpi import mpi_launch
    from sagetrain.launch.rank import host_resource_config, own_host_variables
    from sagetrain.launch.single import single_env
    from sagetrain.launch.tf_distribute import PS_SERVER_MODULE, parameter_server_env, program_env

    plan = spec.plan
    coordinator = coordinator_address(
        plan, plan.coordinator_port if plan.multi_host else PORT_CHOSEN_AT_START
    )
    description: dict[str, Any] = {
        "engine": plan.engine.value,
        "role": plan.role.value,
        "hosts": list(plan.hosts),
        "master": plan.master,
        "current_host": plan.current_host,
        "processes_per_host": {host: plan.processes_on(host) for host in plan.hosts},
        "total_processes": plan.total_processes,
        "interface": plan.interface,
        "notes": [
            f"the interface is {plan.interface} if it exists on the host at start, else the one that "
            "routes to the master",
        ]
        + ([] if plan.multi_host else ["port 0 in SAGETRAIN_COORDINATOR is a free port chosen at start"]),
        "reasons": list(plan.reasons),
    }
    rank_argv = [*spec.rank_launcher, *spec.program_argv]
    if plan.engine is Engine.HOROVOD:
        command, env = mpi_launch(spec, coordinator)
        description["launch"] = {"host": plan.master, "command": command, "env": _added(env, environ)}
    elif plan.engine.uses_tf_config:
        description["launch"] = {}
        for host in plan.hosts:
            # As that host's rank launcher leaves it: with that host's own identity and resource config.
            env = program_env(spec, coordinator, host)
            own_config = host_resource_config(json.loads(env["SM_RESOURCE_CONFIG"]), host)
            env.update(own_host_variables(env, host, own_config))
            description["launch"][host] = {"command": rank_argv, "env": _added(env, environ)}
        if plan.engine is Engine.PARAMETER_SERVER:
            for host in plan.hosts:
                description["launch"][host]["parameter_server"] = {
                    "command": [sys.executable, "-m", PS_SERVER_MODULE],
                    "env": _added(parameter_server_env(spec, host), environ),
                }
    else:
        env = single_env(spec, PORT_CHOSEN_AT_START)
        description["launch"] = {"host": plan.current_host, "command": rank_argv, "env": _added(env, environ)}
    return description


def plan_command(root: Path, gpus: int | None, cpus: int | None = None) -> dict[str, Any]:
    """The plan as JSON. Writes nothing: not under the root, not to this process's environment."""
    from sagetrain.entry import build_spec

    config = load_job_config(root, check_channels=False)
    devices = detect_devices(os.environ)
    planned_gpus = devices.gpus if gpus is None else gpus
    plan = make_plan(config.resources, config.settings, planned_gpus, devices.cpus if cpus is None else cpus)
    code_dir = Path(config.settings.submit_directory or config.paths.code_dir)
    program = _program_for_plan(config.settings.program, code_dir)
    environ = dict(os.environ)
    spec = build_spec(
        config, plan, program, environ, plan.interface, gpus=planned_gpus, cpus=cpus, dry_run=True
    )
    return describe_plan(spec, environ)


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
    try:
        description = plan_command(root, args.gpus, args.cpus)
    except SagetrainError as error:
        print(f"sagetrain plan: {error.cause}", file=sys.stderr)
        raise SystemExit(error.exit_code) from None
    json.dump(description, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
