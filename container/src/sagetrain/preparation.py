"""The job as this host prepares it: the one way every entry point assembles it. The train command
(entry.py), the dry run (``python -m sagetrain plan``) and the SageMaker SDK v3 hooks (sdk/) all call
``prepare_job``; the train command and the dry run then call ``launch_spec``, which differ only in what
the preparation may do:

    prepare_job:  config (/opt/ml) → the job's secrets → this host's devices → plan
    launch_spec:  program (RUN: code unpacked, requirements installed) → interface (RUN: resolved on
                  this host) → the launch spec
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from sagetrain import legacy_keras
from sagetrain.config.devices import Devices, detect_devices
from sagetrain.config.job import JobConfig, load_job_config
from sagetrain.config.job_secret import JobSecrets, read_job_secrets
from sagetrain.config.paths import root_from_environ
from sagetrain.errors import SagetrainError
from sagetrain.launch.spec import JobSpec, build_spec
from sagetrain.plan import Plan, make_plan
from sagetrain.program.kind import Program, ProgramKind, classify_program
from sagetrain.redact import Redactor


class Preparation(Enum):
    """What preparing the job may do on this host."""

    RUN = "run"  # this host runs it: the code unpacked, its requirements installed, the interface resolved
    DESCRIBE = "describe"  # nothing written, installed or resolved: what would run (the dry run, SDK hooks)


@dataclass(frozen=True)
class PreparedJob:
    config: JobConfig
    devices: Devices  # as planned: detected, or as the dry run was told
    plan: Plan
    # Read once, for every use on this host (a dry run without the secret channel's folder: without its file).
    secrets: JobSecrets


def prepare_job(
    environ: Mapping[str, str],
    preparation: Preparation = Preparation.RUN,
    *,
    root: Path | None = None,
    gpus: int | None = None,
    cpus: int | None = None,
    learn_secrets: Callable[[Redactor], None] = lambda redactor: None,
) -> PreparedJob:
    """This host's job: its configuration (channels checked when it runs), secrets, devices
    (``gpus``/``cpus``: as if the host had that many) and plan. ``learn_secrets`` gets the job's secrets
    as soon as they are known, before anything else logs, also when the configuration does not load."""
    root = root or root_from_environ(environ)
    running = preparation is Preparation.RUN
    try:
        config = load_job_config(root, check_channels=running, environ=environ)
    except SagetrainError:
        read_job_secrets(root, environ, learn=learn_secrets)  # for the message about what did not load
        raise
    secrets = read_job_secrets(root, environ, config, channel_required=running, learn=learn_secrets)
    detected = detect_devices(environ)
    devices = dataclasses.replace(
        detected, gpus=detected.gpus if gpus is None else gpus, cpus=detected.cpus if cpus is None else cpus
    )
    plan = make_plan(
        config.resources, config.settings, devices.gpus, devices.cpus,
        legacy_keras_env=legacy_keras.checked_request(environ),
        efa_devices=devices.efa_devices, nccl_efa_plugin=devices.nccl_efa_plugin,
    )  # fmt: skip
    return PreparedJob(config, devices, plan, secrets)


def launch_spec(
    job: PreparedJob, environ: Mapping[str, str], preparation: Preparation, *, cpus: int | None = None
) -> JobSpec:
    """What the launch runs, built the same way for the job and its description (``cpus``: the count the
    dry run was told, for SM_NUM_CPUS)."""
    if preparation is Preparation.RUN:
        from sagetrain.launch.network import resolve_interface
        from sagetrain.program.code import prepare_program

        program = prepare_program(job.config, environ)
        interface = resolve_interface(job.plan)
    else:
        program, interface = described_program(job.config), job.plan.interface
    return build_spec(
        job.config, job.plan, program, environ, interface, job.secrets, gpus=job.devices.gpus, cpus=cpus,
        dry_run=preparation is Preparation.DESCRIBE,
    )  # fmt: skip


def described_program(config: JobConfig) -> Program:
    """The program as it would be classified; a plain script when the code is not here to look at."""
    name = config.settings.program
    code_dir = Path(config.settings.submit_directory or config.paths.code_dir)
    try:
        return classify_program(name, code_dir)
    except SagetrainError:
        script = code_dir / (name or "<sagemaker_program>")
        return Program(ProgramKind.PYTHON_SCRIPT, name or "<sagemaker_program>", script, code_dir)
