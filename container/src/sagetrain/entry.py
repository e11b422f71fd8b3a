"""The image's training entry (``SAGEMAKER_TRAINING_MODULE=sagetrain.entry:main``).

config → plan → launch → run → report, on every host of the job. ``main()`` ends the process itself with
the job's exit code, also when sagemaker-training's ``train`` called it (that one would exit 0).
This module must import fast: no TensorFlow, no boto3 at import time.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from sagetrain.config import JobConfig, Paths, load_job_config, root_from_environ
from sagetrain.config.devices import detect_devices, driver_warnings
from sagetrain.config.hyperparameters import user_hyperparameters
from sagetrain.config.paths import ROOT_ENV, RUN_DIR_ENV, run_dir_from_environ
from sagetrain.config.toolkit_env import sm_value, with_fields
from sagetrain.errors import ExitCode, PlatformError, SagetrainError, Terminated
from sagetrain.launch.job import JobSpec, Report
from sagetrain.launch.rank import HostFacts
from sagetrain.plan import Engine, Plan, make_plan
from sagetrain.report import Verdict, remove_previous_report, write_report
from sagetrain.run.program import (
    TRAINER_MODULE,
    Program,
    ProgramKind,
    adjusted_user_hyperparameters,
    classify_program,
    program_argv,
)

log = logging.getLogger("sagetrain")


class _NonEmptyDict(dict):
    """A dict that is truthy even when empty.

    sagemaker_training's Environment treats an empty argument as "not given" and re-reads the file
    (``resource_config or read_resource_config()``); we hand it the values we validated, always.
    """

    def __bool__(self) -> bool:
        return True


@contextlib.contextmanager
def _environ_kept() -> Iterator[None]:
    """Undo what sagemaker_training writes to os.environ (its root before first import, JOB_NAME,
    CURRENT_HOST, AWS_REGION): this process's environment stays as it was."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _moved(value: Any, old: str, new: str) -> Any:
    """``value`` with every path under ``old`` moved under ``new``, inside lists and dicts too."""
    if isinstance(value, str):
        return new + value[len(old) :] if value == old or value.startswith(old + "/") else value
    if isinstance(value, list):
        return [_moved(item, old, new) for item in value]
    if isinstance(value, dict):
        return {key: _moved(item, old, new) for key, item in value.items()}
    return value


def rebased_env_vars(variables: Mapping[str, str], old: str, new: str) -> dict[str, str]:
    """SM_* variables with the paths under ``old`` moved under ``new``; JSON values re-encoded as the
    toolkit encodes them, and only when a path in them moved. Pure."""
    rebased = {}
    for name, value in variables.items():
        try:
            decoded = json.loads(value) if value.startswith(("{", "[")) else value
        except ValueError:
            decoded = value
        moved = _moved(decoded, old, new)
        rebased[name] = value if moved == decoded else (moved if isinstance(moved, str) else sm_value(moved))
    return rebased


def toolkit_env_vars(
    config: JobConfig,
    hyperparameters: Mapping[str, Any],
    *,
    gpus: int,
    cpus: int | None = None,
    dry_run: bool = False,
) -> dict[str, str]:
    """The SM_* variables exactly as sagemaker_training exports them, except the device counts: ``gpus``
    (those visible to the job, or a dry run's planned count) and, when given, ``cpus``. Runs nvidia-smi
    and leaves os.environ as it was. The toolkit takes its root from SAGEMAKER_BASE_DIR when first
    imported and creates <root>/code then, as in AWS's images; a dry run has it import under an empty
    temporary root instead, so nothing is written under the job's root, and moves the paths back."""
    with _environ_kept(), contextlib.ExitStack() as cleanup:
        scratch = tempfile.TemporaryDirectory(prefix="sagetrain-plan-") if dry_run else None
        os.environ[ROOT_ENV] = cleanup.enter_context(scratch) if scratch else str(config.paths.root)
        from sagemaker_training import environment

        toolkit = environment.Environment(
            resource_config=_NonEmptyDict(config.raw_resource_config),
            input_data_config=_NonEmptyDict(config.raw_input_data_config),
            hyperparameters=_NonEmptyDict(hyperparameters),
        )
        variables = toolkit.to_env_vars()
        imported_root = str(environment.base_dir)
    if imported_root != str(config.paths.root):  # imported earlier, or under the dry run's scratch root
        variables = rebased_env_vars(variables, imported_root, str(config.paths.root))
    # The toolkit counts every GPU nvidia-smi lists, ignoring NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES.
    counts = {"num_gpus": gpus} if cpus is None else {"num_gpus": gpus, "num_cpus": cpus}
    return {**variables, **with_fields(variables, counts)}


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
    interface, warning = choose_interface(plan.interface, interface_addresses(), local_address_towards, peer)
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
    config: JobConfig,
    plan: Plan,
    program: Program,
    environ: Mapping[str, str],
    interface: str,
    *,
    gpus: int,
    cpus: int | None = None,
    dry_run: bool = False,
) -> JobSpec:
    """Everything a launcher needs: the program's argv, the job environment, where ranks start. The job
    and the dry run (``python -m sagetrain plan``) both build it here, so the plan shows what runs.
    Starts no part of the job; for the SM_* variables it runs sagemaker_training's Environment (see
    toolkit_env_vars: nvidia-smi; in a job, <root>/code created if missing)."""
    from sagetrain.mapping_compat import to_cmd_args

    user_hps = adjusted_user_hyperparameters(
        user_hyperparameters(config.hyperparameters), config.hyperparameters, environ.get("TRAINING_JOB_NAME")
    )
    toolkit_hps = {**config.toolkit_hyperparameters, **user_hps}
    argv = program_argv(program, to_cmd_args(user_hps), sys.executable)
    run_dir = run_dir_from_environ(environ)
    job_env = {
        **environ,
        **toolkit_env_vars(config, toolkit_hps, gpus=gpus, cpus=cpus, dry_run=dry_run),
    }
    job_env.update(
        {
            "SAGETRAIN_ENGINE": plan.engine.value,
            "SAGETRAIN_PROGRAM": program.name,
            "SAGETRAIN_MASTER_HOST": plan.master,
            RUN_DIR_ENV: str(run_dir),
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


def run_job(environ: Mapping[str, str], report: Report) -> Verdict:
    """This host's part of the job; the engine hands its verdict to ``report`` as soon as it decided."""
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
    spec = build_spec(config, plan, program, environ, resolve_interface(plan), gpus=devices.gpus)
    # For the ranks mpirun starts here with the master's environment (launch/rank.py).
    # The CPU count as sagemaker_training counts it, since that is what SM_NUM_CPUS says on this host.
    facts = HostFacts(plan.current_host, devices.gpus, int(spec.env["SM_NUM_CPUS"]))
    facts.write(spec.run_dir)
    return execute(spec, sys.executable, report)


class JobEnd:
    """SIGTERM/SIGINT and the report. The first signal raises Terminated in the main thread, which stops
    the job; once the verdict is final (the first ``report``), the report is written and no signal
    changes it. ``report`` is the one place a verdict becomes final."""

    def __init__(self, paths: Paths) -> None:
        self._paths = paths
        self._stopping = False
        self.verdict: Verdict | None = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.verdict is not None or self._stopping:
            # The verdict is final, or the clean-up the first signal started must not be interrupted.
            state = "over" if self.verdict is not None else "stopping"
            log.info("%s ignored: the job is %s", signal.Signals(signum).name, state)
            return
        self._stopping = True
        raise Terminated(
            f"the job was stopped by {signal.Signals(signum).name} (the container was asked to stop)"
        )

    def report(self, verdict: Verdict) -> Verdict:
        """Make ``verdict`` final and write it; the final verdict (the first one reported)."""
        if self.verdict is not None:
            return self.verdict
        self.verdict = verdict
        try:
            written = write_report(self._paths, verdict)
        except OSError as error:
            log.error("cannot write the report under %s: %s", self._paths.output_dir, error)
        else:
            log.info("wrote %s", written)
        return verdict


def run(environ: Mapping[str, str]) -> int:
    """Run this host's part of the job and write the report; the exit code."""
    logging.basicConfig(level=logging.INFO, format="sagetrain %(levelname)s: %(message)s", stream=sys.stderr)
    paths = Paths(root_from_environ(environ))
    end = JobEnd(paths)
    end.install()
    try:
        remove_previous_report(paths)  # a restart on the same tree must not find our last run's report
        verdict = run_job(environ, end.report)
    except SagetrainError as error:
        detail = traceback.format_exc() if isinstance(error, PlatformError) else ""
        verdict = Verdict(error.exit_code, error.cause, detail)
    except Exception as error:  # our bug: still report it, as a platform error
        verdict = Verdict(
            ExitCode.PLATFORM_ERROR, f"internal error in sagetrain: {error!r}", traceback.format_exc()
        )
    verdict = end.report(verdict)  # the engine's, if it reported; else this one (it ended before deciding)
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
