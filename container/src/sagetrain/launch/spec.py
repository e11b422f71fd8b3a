"""What every engine runs from: the job spec (plan, program argv, job environment, where ranks start),
built once here for the job and for the dry run (``python -m sagetrain plan``), so the plan shows what
runs."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sagetrain import contracts, legacy_keras
from sagetrain.config.checkpoints import read_checkpoint_dir
from sagetrain.config.hyperparameters import LaunchSettings
from sagetrain.config.job import JobConfig
from sagetrain.config.job_secret import SECRET_VAR, JobSecrets
from sagetrain.config.paths import ROOT_ENV, Paths
from sagetrain.config.toolkit_env import NUM_CPUS_VAR, TRAINING_JOB_NAME_VAR, toolkit_env_vars
from sagetrain.contracts import HostFacts, RunDir
from sagetrain.deadline import Deadline
from sagetrain.errors import UserError
from sagetrain.launch.coordinator import JobHosts
from sagetrain.launch.members import chosen_filter, filter_env
from sagetrain.plan.model import Plan
from sagetrain.program.kind import Program, adjusted_user_hyperparameters, program_argv
from sagetrain.report.saved_files import CheckpointFolder

# Linux refuses an environment string ("NAME=value") or an argument longer than this (MAX_ARG_STRLEN):
# 100 hyperparameters of 2,500 characters, which SageMaker accepts, make SM_HPS, SM_USER_ARGS and
# SM_TRAINING_ENV longer.
MAX_ENV_STRING_BYTES = 128 * 1024
# Linux refuses to start a program whose arguments and environment together take more than ARG_MAX, a
# quarter of the stack limit: 2 MiB under the usual 8 MiB (Docker's and SageMaker's default). Every
# hyperparameter is in both, as --name value and SM_HP_<NAME>; SageMaker's limits keep plain text well
# within it, but 100 values of 2,500 CJK characters inside lists (3 bytes each as arguments, 6 as the
# toolkit's \uXXXX in SM_HP_*) already take 2.4 MB.
MAX_EXEC_BYTES = 2 * 1024 * 1024
# Kept free for what is added after the spec: mpirun's -x list and host list, the variables it gives a
# rank (OMPI_ARGV repeats the command line when that is under 128 KiB), or TF_CONFIG (104 KiB at most
# within the host limits, config/limits.py); and each rank's own variables.
EXEC_RESERVE_BYTES = 256 * 1024


@dataclass(frozen=True)
class JobSpec:
    plan: Plan
    program: Program
    program_argv: tuple[str, ...]
    env: Mapping[str, str]  # the job environment every user process gets
    rank_launcher: tuple[str, ...]  # argv prefix; the program's argv follows
    run_dir: RunDir
    code_dir: Path
    checkpoints: CheckpointFolder  # this host's (checkpointconfig.json's LocalPath)
    interface: str  # resolved on this host
    secrets: JobSecrets  # as prepare_job read them: the hosts' keys, the values every line masks
    # What this host's entry detected, for the ranks mpirun starts here with the master's environment.
    host_facts: HostFacts
    python: str = sys.executable
    # Variables too long for the environment: their values, for the files <NAME>_FILE names.
    env_files: Mapping[str, str] = field(default_factory=dict)
    # The program's arguments when too long to pass through mpirun: the rank launcher appends them.
    args_file_arguments: tuple[str, ...] = ()
    # The members-only library every process of the job preloads (launch/members.py); None: none.
    members_filter: Path | None = None
    # The folder of the channel holding the job's secret, if one does: made its owner's alone.
    secret_channel: Path | None = None

    @property
    def job_hosts(self) -> JobHosts:
        """The job's hosts as the coordinator meets them."""
        return JobHosts.of_plan(self.plan, self.secrets.membership)

    @property
    def rank_argv(self) -> list[str]:
        """What starts one rank: the rank launcher, then the program."""
        return [*self.rank_launcher, *self.program_argv]

    def worker_wait(self, activity: str) -> Deadline:
        """For hosts to find each other (sagetrain_worker_wait_seconds)."""
        seconds = self.plan.launch.worker_wait_seconds
        return setting_deadline(seconds, "worker_wait_seconds", activity, "hosts")

    def launch_wait(self, activity: str) -> Deadline:
        """For mpirun to start every rank (sagetrain_launch_wait_seconds)."""
        seconds = self.plan.launch.launch_wait_seconds
        return setting_deadline(seconds, "launch_wait_seconds", activity, "ranks")


def setting_deadline(seconds: float, setting: str, activity: str, what: str) -> Deadline:
    hint = f"if {what} start slowly, raise the hyperparameter {LaunchSettings.key(setting)}"
    return Deadline(seconds, activity, hint=hint)


def too_long_for_the_environment(
    env: Mapping[str, str], run_dir: RunDir
) -> tuple[dict[str, str], dict[str, str]]:
    """(``env`` with each variable too long for the environment replaced by ``<NAME>_FILE`` naming the file
    its value goes to, {name: value} of the variables so replaced). Pure."""
    kept, moved = dict(env), {}
    for name, value in env.items():
        if len(name.encode()) + len(value.encode()) + 2 > MAX_ENV_STRING_BYTES:
            moved[name] = value
            del kept[name]
            kept[name + contracts.FILE_VAR_SUFFIX] = str(run_dir.env_file(name))
    return kept, moved


def exec_bytes(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """What starting ``argv`` with ``env`` takes of ARG_MAX: each string with its NUL, and a pointer to
    each. Pure."""
    strings = [*argv, *(f"{name}={value}" for name, value in env.items())]
    return sum(len(os.fsencode(string)) + 1 + 8 for string in strings) + 16


def check_fits_one_exec(argv: Sequence[str], env: Mapping[str, str], source: Path) -> None:
    """Refuse a program Linux would not start ("Argument list too long"). No one argument or variable
    can be too long by then: a hyperparameter value is within 128 KiB (config/limits.py), a longer
    variable is in a file (too_long_for_the_environment). Pure."""
    size, limit = exec_bytes(argv, env), MAX_EXEC_BYTES - EXEC_RESERVE_BYTES
    if size > limit:
        raise UserError(
            f"{source} holds hyperparameters that, passed as --name value and as SM_HP_<NAME>, make the "
            f"program's arguments and environment {size:,} bytes, more than the {limit:,} that fit under "
            f"Linux's {MAX_EXEC_BYTES >> 20} MiB for starting a program with room for the launchers; shorten "
            "the longest or pass them as a file in a data channel"
        )


def env_added(env: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """What ``env`` adds to, or changes in, ``environ`` (what the dry run shows)."""
    return {name: value for name, value in sorted(env.items()) if environ.get(name) != value}


def checkpoint_dir_or_default(paths: Paths) -> Path:
    """The job's checkpoint folder; SageMaker's default when its configuration cannot be read (the
    launcher only looks there: the managed trainer, which writes there, reports a bad configuration)."""
    try:
        return read_checkpoint_dir(paths)
    except UserError:
        return paths.checkpoint_dir


def rank_launcher_argv() -> tuple[str, ...]:
    installed = shutil.which("sagetrain-rank")
    if installed:
        return (installed, "--")
    return (sys.executable, "-m", "sagetrain.launch.rank", "--")


def build_spec(
    config: JobConfig,
    plan: Plan,
    program: Program,
    environ: Mapping[str, str],
    interface: str,
    secrets: JobSecrets,
    *,
    gpus: int,
    cpus: int | None = None,
    dry_run: bool = False,
) -> JobSpec:
    """Everything a launcher needs: the program's argv, the job environment, where ranks start. Starts
    no part of the job; for the SM_* variables it runs sagemaker_training's Environment (see
    toolkit_env_vars: nvidia-smi; in a job, <root>/code created if missing)."""
    from sagetrain.mapping_compat import to_cmd_args

    user_hps = adjusted_user_hyperparameters(
        config.user_hyperparameters, config.hyperparameters, environ.get(TRAINING_JOB_NAME_VAR)
    )
    toolkit_hps = {**config.toolkit_hyperparameters, **user_hps}
    user_args = to_cmd_args(user_hps)
    argv = program_argv(program, user_args, sys.executable)
    run_dir = RunDir.from_env(environ)
    members_filter = chosen_filter(
        plan.launch.members_only_ports,
        contracts.MEMBERS_FILTER_LIBRARY,
        contracts.MEMBERS_FILTER_LIBRARY.is_file(),
    )
    job_env = {
        # On an EFA host, NCCL's and libfabric's settings (plan/efa.py), unless the environment sets them.
        **dict(plan.efa_env),
        # The secret stays with the launcher: ranks prove themselves with their host's key (run_dir.py).
        **{name: value for name, value in environ.items() if name != SECRET_VAR},
        **filter_env(members_filter, environ),
        **toolkit_env_vars(config, toolkit_hps, gpus=gpus, cpus=cpus, dry_run=dry_run),
        contracts.TF_LOG_LEVEL_VAR: environ.get(contracts.TF_LOG_LEVEL_VAR, contracts.QUIET_TF_LOG_LEVEL),
        contracts.ENGINE_VAR: plan.engine.value,
        contracts.PROGRAM_VAR: program.name,
        contracts.MASTER_HOST_VAR: plan.master,
        contracts.RUN_DIR_VAR: str(run_dir.root),
        ROOT_ENV: str(config.paths.root),
        **(legacy_keras.switch_env() if plan.legacy_keras else {}),
    }
    job_env, env_files = too_long_for_the_environment(job_env, run_dir)
    launcher = rank_launcher_argv()
    check_fits_one_exec([*launcher, *argv], job_env, config.paths.hyperparameters)
    # mpirun gives every rank its whole command line in one variable (OMPI_ARGV), which must fit too.
    in_file = user_args and len(shlex.join(argv).encode()) + 64 > MAX_ENV_STRING_BYTES
    if in_file:
        argv = argv[: len(argv) - len(user_args)]
        launcher = (*launcher[:-1], contracts.ARGS_FILE_OPTION, str(run_dir.args_file), launcher[-1])
    return JobSpec(
        plan=plan,
        program=program,
        program_argv=tuple(argv),
        env=job_env,
        env_files=env_files,
        args_file_arguments=tuple(user_args) if in_file else (),
        rank_launcher=launcher,
        run_dir=run_dir,
        code_dir=program.code_dir,
        checkpoints=CheckpointFolder(checkpoint_dir_or_default(config.paths), plan.current_host),
        interface=interface,
        secrets=secrets,
        # The CPU count as sagemaker_training counts it, since that is what SM_NUM_CPUS says on this host.
        host_facts=HostFacts(plan.current_host, gpus, int(job_env[NUM_CPUS_VAR])),
        members_filter=members_filter,
        secret_channel=secret_channel_dir(config),
    )


def secret_channel_dir(config: JobConfig) -> Path | None:
    """The folder of the channel that holds the job's secret; None when no channel does. Pure."""
    name = config.settings.launch.job_secret_channel
    return config.paths.channel_dir(name) if name else None
