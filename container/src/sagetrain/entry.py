"""The image's training entry (``SAGEMAKER_TRAINING_MODULE=sagetrain.entry:main``).

On every host of the job: the job prepared (preparation.py: config → plan → program → launch spec),
launched (launch/), reported (report/). ``main()`` ends the process itself with
the job's exit code, also when sagemaker-training's ``train`` called it (that one would exit 0).
This module must import fast: no TensorFlow, no boto3 at import time.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Mapping
from typing import NoReturn

from sagetrain.config.devices import Devices, driver_warnings
from sagetrain.config.job_secret import JobSecret, missing_secret_warning
from sagetrain.config.paths import Paths, root_from_environ
from sagetrain.errors import ExitCode, PlatformError, SagetrainError
from sagetrain.launch.process import exit_now
from sagetrain.plan import Plan, Role
from sagetrain.preparation import Preparation, launch_spec, prepare_job
from sagetrain.program.kind import Program
from sagetrain.redact import RedactingFilter
from sagetrain.report import Verdict, remove_previous_report
from sagetrain.report.job_end import JobEnd
from sagetrain.report.model_dir import empty_model_warning

log = logging.getLogger("sagetrain")


def log_plan(plan: Plan, devices: Devices, secret: JobSecret) -> None:
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
    for warning in driver_warnings(devices, uses_horovod=plan.engine.entry.loads_horovod):
        log.warning("%s", warning)
    no_secret = missing_secret_warning(len(plan.hosts), secret)
    if no_secret is not None:
        log.warning("%s", no_secret)


def log_program(program: Program) -> None:
    log.info("program: %s (%s)", program.name, program.why)
    if program.near_miss:
        log.warning("%s", program.near_miss)


def run_job(environ: Mapping[str, str], end: JobEnd) -> Verdict:
    """This host's part of the job; the engine hands its verdict to ``end.report`` as soon as it
    decided."""
    from sagetrain.launch import execute

    job = prepare_job(environ, Preparation.RUN, learn_secrets=end.learn_secrets)
    logging.getLogger().setLevel(job.config.settings.toolkit_log_level)
    log_plan(job.plan, job.devices, job.secrets.secret)
    spec = launch_spec(job, environ, Preparation.RUN)
    log_program(spec.program)
    verdict = execute(spec, end)
    if verdict.succeeded and job.plan.role is not Role.WORKER:
        warning = empty_model_warning(job.config.paths.model_dir)
        if warning is not None:
            log.warning("%s", warning)
    return verdict


def run(environ: Mapping[str, str]) -> int:
    """Run this host's part of the job and write the report; the exit code."""
    logging.basicConfig(level=logging.INFO, format="sagetrain %(levelname)s: %(message)s", stream=sys.stderr)
    log_filter = RedactingFilter()
    for handler in logging.getLogger().handlers:
        handler.addFilter(log_filter)
    paths = Paths(root_from_environ(environ))
    end = JobEnd(paths, log_filter)
    end.install()
    try:
        remove_previous_report(paths)  # a restart on the same tree must not find our last run's report
        verdict = run_job(environ, end)
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
    code: int = ExitCode.PLATFORM_ERROR
    try:
        code = run(os.environ)
    finally:
        exit_now(code)


if __name__ == "__main__":
    main()
