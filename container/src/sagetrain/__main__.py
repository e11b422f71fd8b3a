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
from sagetrain.config.hyperparameters import user_hyperparameters
from sagetrain.errors import SagetrainError
from sagetrain.plan import Engine, Plan, make_plan
from sagetrain.plan.mpi_command import SshSetup, mpirun_command
from sagetrain.plan.tf_config import TaskType, tf_config
from sagetrain.run.program import Program, ProgramKind, classify_program, program_argv

RANK_LAUNCHER = ("sagetrain-rank", "--")
RUN_DIR = Path("/run/sagetrain")


def _program_for_plan(name: str | None, code_dir: Path) -> Program:
    """The program as it would be classified; a plain script when the code is not here to look at."""
    try:
        return classify_program(name, code_dir)
    except SagetrainError:
        script = code_dir / (name or "<sagemaker_program>")
        return Program(ProgramKind.PYTHON_SCRIPT, name or "<sagemaker_program>", script, code_dir)


def describe_plan(plan: Plan, argv: list[str]) -> dict[str, Any]:
    """The plan as JSON: what runs where, the exact launch command, the environment we add."""
    added = {"SAGETRAIN_ENGINE": plan.engine.value, "SAGETRAIN_MASTER_HOST": plan.master}
    description: dict[str, Any] = {
        "engine": plan.engine.value,
        "role": plan.role.value,
        "hosts": list(plan.hosts),
        "master": plan.master,
        "current_host": plan.current_host,
        "processes_per_host": {host: plan.processes_on(host) for host in plan.hosts},
        "total_processes": plan.total_processes,
        "interface": plan.interface,
        "reasons": list(plan.reasons),
    }
    rank_argv = [*RANK_LAUNCHER, *argv]
    if plan.engine is Engine.HOROVOD:
        ssh = (
            SshSetup(RUN_DIR / "ssh" / "id_ed25519", RUN_DIR / "ssh" / "known_hosts", plan.ssh_port)
            if plan.multi_host
            else None
        )
        command = mpirun_command(
            plan, interface=plan.interface, env_names=sorted(added), rank_argv=rank_argv, ssh=ssh
        )
        description["launch"] = {
            "host": plan.master,
            "command": command,
            "env": added,
            "note": "every other variable of the job environment (the SM_* of sagemaker_training, "
            "the image's own) is also passed with -x NAME, in sorted order",
        }
    elif plan.engine.uses_tf_config:
        description["launch"] = {
            host: {"command": rank_argv, "env": {**added, "TF_CONFIG": json.dumps(tf_config(plan, host))}}
            for host in plan.hosts
        }
        if plan.engine is Engine.PARAMETER_SERVER:
            for host in plan.hosts:
                description["launch"][host]["parameter_server"] = {
                    "command": ["python", "-m", "sagetrain.launch.ps_server"],
                    "env": {"TF_CONFIG": json.dumps(tf_config(plan, host, TaskType.PS))},
                }
    else:
        description["launch"] = {"host": plan.current_host, "command": rank_argv, "env": added}
    return description


def plan_command(root: Path, gpus: int | None, cpus: int | None = None) -> dict[str, Any]:
    config = load_job_config(root, check_channels=False)
    devices = detect_devices(os.environ)
    plan = make_plan(
        config.resources,
        config.settings,
        devices.gpus if gpus is None else gpus,
        devices.cpus if cpus is None else cpus,
    )
    code_dir = Path(config.settings.submit_directory or config.paths.code_dir)
    program = _program_for_plan(config.settings.program, code_dir)
    from sagetrain.mapping_compat import to_cmd_args

    argv = program_argv(program, to_cmd_args(user_hyperparameters(config.hyperparameters)), "python")
    return describe_plan(plan, argv)


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
