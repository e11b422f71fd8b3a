"""The image's training entry (``SAGEMAKER_TRAINING_MODULE=sagetrain.entry:main``).

config → plan → launch → run → report, on every host of the job. ``main()`` ends the process itself with
the job's exit code, also when sagemaker-training's ``train`` called it (that one would exit 0).
This module must import fast: no TensorFlow, no boto3 at import time.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import sys
import traceback
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any, NoReturn

from sagetrain.config import JobConfig, Paths, load_job_config, root_from_environ
from sagetrain.config.devices import detect_devices, driver_warnings
from sagetrain.config.hyperparameters import user_hyperparameters
from sagetrain.config.paths import ROOT_ENV
from sagetrain.errors import ExitCode, PlatformError, SagetrainError, Terminated
from sagetrain.launch.job import JobSpec
from sagetrain.plan import Engine, Plan, make_plan
from sagetrain.report import Verdict, write_report
from sagetrain.run.program import (
    TRAINER_MODULE,
    Program,
    ProgramKind,
    adjusted_user_hyperparameters,
    classify_program,
    program_argv,
)

log = logging.getLogger("sagetrain")

DEFAULT_RUN_DIR = Path("/run/sagetrain")


class _NonEmptyDict(dict):
    """A dict that is truthy even when empty.

    sagemaker_training's Environment treats an empty argument as "not given" and re-reads the file
    (``resource_config or read_resource_config()``); we hand it the values we validated, always.
    """

    def __bool__(self) -> bool:
        return True


def toolkit_env_vars(config: JobConfig, hyperparameters: Mapping[str, Any]) -> dict[str, str]:
    """The SM_* variables exactly as sagemaker_training exports them. Runs nvidia-smi, and sets this
    process's SAGEMAKER_BASE_DIR: the toolkit reads its root from there when first imported."""
    os.environ[ROOT_ENV] = str(config.paths.root)
    from sagemaker_training import environment

    toolkit = environment.Environment(
        resource_config=_NonEmptyDict(config.raw_resource_config),
        input_data_config=_NonEmptyDict(config.raw_input_data_config),
        hyperparameters=_NonEmptyDict(hyperparameters),
    )
    return toolkit.to_env_vars()


def rank_launcher_argv() -> tuple[str, ...]:
    installed = shutil.which("sagetrain-rank")
    if installed:
        return (installed, "--")
    return (sys.executable, "-m", "sagetrain.launch.rank", "--")


def resolve_interface(plan: Plan) -> str:
    from sagetrain.launch.network import choose_interface, interface_addresses, local_address_towards

    if not plan.multi_host:
        return plan.interface
    peer = plan.master if plan.current_host != plan.master else plan.workers[0]
    interface, warning = choose_interface(
        plan.interface, interface_addresses(), local_address_towards(peer), peer
    )
    if warning:
        log.warning("%s", warning)
    return interface


def prepare_program(config: JobConfig) -> Program:
    from sagetrain.run.code import install_package, install_requirements, locate_code

    code_dir = locate_code(config.paths, config.settings)
    program = classify_program(config.settings.program, code_dir)
    if program.kind is ProgramKind.KERAS_MODEL_MODULE and importlib.util.find_spec(TRAINER_MODULE) is None:
        raise PlatformError(
            f"{program.name} is a Keras model module (it defines build_model), but the managed trainer "
            f"{TRAINER_MODULE} is not available in this image"
        )
    install_requirements(code_dir)
    if program.kind is ProgramKind.PYTHON_PACKAGE:
        install_package(code_dir)
    return program


def build_spec(
    config: JobConfig, plan: Plan, program: Program, environ: Mapping[str, str], interface: str
) -> JobSpec:
    """Everything a launcher needs: the program's argv, the job environment, where ranks start. The job
    and the dry run (``python -m sagetrain plan``) both build it here, so the plan shows what runs.
    Starts no part of the job; for the SM_* variables it runs sagemaker_training's Environment, which
    runs nvidia-smi and, when first imported, creates SageMaker's folders under the root if missing."""
    from sagetrain.mapping_compat import to_cmd_args

    user_hps = adjusted_user_hyperparameters(
        user_hyperparameters(config.hyperparameters), config.hyperparameters, environ.get("TRAINING_JOB_NAME")
    )
    toolkit_hps = {**config.toolkit_hyperparameters, **user_hps}
    argv = program_argv(program, to_cmd_args(user_hps), sys.executable)
    run_dir = Path(environ.get("SAGETRAIN_RUN_DIR") or DEFAULT_RUN_DIR)
    job_env = {**environ, **toolkit_env_vars(config, toolkit_hps)}
    job_env.update(
        {
            "SAGETRAIN_ENGINE": plan.engine.value,
            "SAGETRAIN_PROGRAM": program.name,
            "SAGETRAIN_MASTER_HOST": plan.master,
            "SAGETRAIN_RUN_DIR": str(run_dir),
            ROOT_ENV: str(config.paths.root),
        }
    )
    return JobSpec(
        plan=plan,
        program_name=program.name,
        program_argv=tuple(argv),
        env=job_env,
        rank_launcher=rank_launcher_argv(),
        run_dir=run_dir,
        code_dir=program.code_dir,
        interface=interface,
    )


def run_job(environ: MutableMapping[str, str]) -> Verdict:
    from sagetrain.launch import execute

    root = root_from_environ(environ)
    config = load_job_config(root)
    devices = detect_devices(environ)
    plan = make_plan(config.resources, config.settings, devices.gpus, devices.cpus)
    log.info(
        "plan: engine=%s hosts=%s master=%s role=%s processes/host=%d total=%d (%s)",
        plan.engine.value,
        ",".join(plan.hosts),
        plan.master,
        plan.role.value,
        plan.processes_per_host,
        plan.total_processes,
        "; ".join(plan.reasons),
    )
    for warning in driver_warnings(devices, uses_horovod=plan.engine is Engine.HOROVOD):
        log.warning("%s", warning)
    program = prepare_program(config)
    spec = build_spec(config, plan, program, environ, resolve_interface(plan))
    return execute(spec, sys.executable)


def _raise_terminated(signum: int, _frame: object) -> None:
    # Later signals must not interrupt the clean-up the first one started.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Terminated(
        f"the job was stopped by {signal.Signals(signum).name} (the container was asked to stop)"
    )


def run(environ: MutableMapping[str, str]) -> int:
    """Run this host's part of the job and write the report; the exit code."""
    logging.basicConfig(level=logging.INFO, format="sagetrain %(levelname)s: %(message)s", stream=sys.stderr)
    paths = Paths(root_from_environ(environ))
    signal.signal(signal.SIGTERM, _raise_terminated)
    signal.signal(signal.SIGINT, _raise_terminated)
    try:
        verdict = run_job(environ)
    except SagetrainError as error:
        detail = traceback.format_exc() if isinstance(error, PlatformError) else ""
        verdict = Verdict(error.exit_code, error.cause, detail)
    except Exception as error:  # our bug: still report it, as a platform error
        verdict = Verdict(
            ExitCode.PLATFORM_ERROR, f"internal error in sagetrain: {error!r}", traceback.format_exc()
        )
    try:
        written = write_report(paths, verdict)
    except OSError as error:
        log.error("cannot write the report under %s: %s", paths.output_dir, error)
    else:
        log.info("wrote %s", written)
    if verdict.succeeded:
        log.info("training succeeded")
    else:
        log.error("training failed (exit code %d): %s", verdict.exit_code, verdict.cause)
    return verdict.exit_code


def main() -> NoReturn:
    code = ExitCode.PLATFORM_ERROR
    try:
        code = run(os.environ)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
