"""The SageMaker Python SDK v3's own drivers (``ModelTrainer`` with ``SourceCode``), met in this image.

With ``SourceCode`` the SDK replaces the image's entrypoint with ``/bin/bash -c … sm_train.sh`` and ships
its drivers in the channel ``sm_drivers``; ``sm_train.sh`` then runs one of them with the image's
``python3``:

- ``distributed_drivers/basic_script_driver.py`` (no ``distributed=``): runs the entry script once per
  host, whatever the hyperparameters ask. This image hands that process over to its own launcher
  (``train``), which reads the program from the SDK's ``sourcecode.json`` and decides the distribution
  from the ``sagemaker_*`` hyperparameters (or chooses), exactly as without ``SourceCode``.
- ``distributed_drivers/mpi_driver.py`` (``distributed=MPI()``): starts ``/usr/sbin/sshd -D``, connects
  with paramiko and the system ``ssh``, then runs ``mpirun`` over ssh. Before it starts, this image
  writes ssh keys made for this job (``sdk/ssh.py``) and puts its own ``mpirun`` first on the driver's
  PATH, so that ``process_count_per_node`` means processes on each host (``sdk/mpirun.py``).
- ``SourceCode(command=…)``: ``sm_train.sh`` runs the command itself, once on every host, and the SDK
  drops ``distributed=``. When the job asks for a distribution (a ``sagemaker_*_enabled`` hyperparameter
  or ``distributed=``), the command's first Python process fails at once saying what to do, instead of
  training one unconnected model per host; on several hosts without one, it warns once.

The drivers are recognised by the script the interpreter starts with, the command by the SDK's
variables: the image imports this module at every interpreter start (a ``.pth`` file). Those checks cost a
few comparisons; everything else is imported only for an SDK process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from sagetrain import contracts
from sagetrain.config.paths import Paths, root_from_environ
from sagetrain.config.sdk_source_code import DRIVERS_CHANNEL, DRIVERS_FOLDER, SourceCode, read_source_code

if TYPE_CHECKING:
    from sagetrain.config.hyperparameters import JobSettings

# Our launcher: what the image runs when started without arguments.
TRAIN = "/usr/local/bin/train"
# Set in the launcher's environment when it took over from the SDK's script driver, and in the MPI
# driver's and the command's once prepared: that process, and everything it starts, is never taken for a
# driver again.
HANDED_OVER_VAR = "SAGETRAIN_SDK_DRIVER"
# Variables a process started by our launcher or by mpirun has: never a driver's process.
_LAUNCHED_VARS = (contracts.RANK_VAR, contracts.MPI_RANK_VAR, contracts.PMI_RANK_VAR, HANDED_OVER_VAR)
# Written by the SDK's environment.py to sm_training.env, which sm_train.sh sources: the first when the
# job has a sourcecode.json, the second when its distributed.json is not empty (distributed= was given),
# the third always.
SOURCE_DIR_VAR = "SM_SOURCE_DIR"
DISTRIBUTED_CONFIG_VAR = "SM_DISTRIBUTED_CONFIG"
HOST_COUNT_VAR = "SM_HOST_COUNT"
# The launcher's own module (`train` runs ``python -m sagetrain train``): never the SDK's command.
_LAUNCHER_ARGV = ("-m", "sagetrain")


class SdkDriver(Enum):
    """An SDK v3 driver script, by its file name."""

    BASIC_SCRIPT = "basic_script_driver.py"
    MPI = "mpi_driver.py"


def _launched(environ: Mapping[str, str]) -> bool:
    return any(name in environ for name in _LAUNCHED_VARS)


def recognise(argv: Sequence[str], environ: Mapping[str, str]) -> SdkDriver | None:
    """The SDK driver this interpreter was started to run, or None. Pure but for nothing: a name check."""
    if not argv or _launched(environ):
        return None
    script = os.path.normpath(argv[0])
    for driver in SdkDriver:
        if script.endswith(f"/{DRIVERS_CHANNEL}/{DRIVERS_FOLDER}/{driver.value}"):
            return driver if script == str(_drivers_dir(environ) / DRIVERS_FOLDER / driver.value) else None
    return None


def _drivers_dir(environ: Mapping[str, str]) -> Path:
    return Paths(root_from_environ(environ)).channel_dir(DRIVERS_CHANNEL)


def withhold_our_settings(environ: MutableMapping[str, str], *, secret_too: bool) -> None:
    """Take this image's ``sagetrain_*`` hyperparameters (a secret among them, maybe) out of the SDK's
    hyperparameter variables, and with ``secret_too`` the secret's variable: the MPI driver passes
    ``SM_HPS`` to the user's script as arguments, logs that command line and writes its environment to
    ``/etc/environment``. Our launcher reads its settings from hyperparameters.json, not from these."""
    from sagetrain.config.hyperparameters import SAGETRAIN_PREFIX
    from sagetrain.config.job_secret import SECRET_VAR
    from sagetrain.config.toolkit_env import hyperparameters_withheld

    updates, removed = hyperparameters_withheld(environ, SAGETRAIN_PREFIX)
    for name in (*removed, *((SECRET_VAR,) if secret_too else ())):
        environ.pop(name, None)
    environ.update(updates)


def hand_over(environ: MutableMapping[str, str]) -> None:
    """Replace this process (the SDK's script driver) with the image's launcher; does not return."""
    withhold_our_settings(environ, secret_too=False)  # the launcher reads the secret's variable
    sys.stderr.write(
        "sagetrain: the SageMaker SDK's script driver started; the image's launcher runs the job instead "
        "and distributes it as the sagemaker_* hyperparameters ask (or as it chooses without them)\n"
    )
    sys.stderr.flush()
    os.execve(TRAIN, [TRAIN], {**environ, HANDED_OVER_VAR: SdkDriver.BASIC_SCRIPT.name.lower()})


def fail_at_once(cause: str, exit_code: int, environ: Mapping[str, str]) -> None:
    """Write ``cause`` as the failure file's first line and to stderr, with the job's secrets masked, and
    end this process."""
    from sagetrain.atomic_file import write_atomically
    from sagetrain.config.job_secret import read_job_redactor

    try:
        root = root_from_environ(environ)
        cause = read_job_redactor(root, environ)(cause)
        sys.stderr.write(f"sagetrain: {cause}\n")
        sys.stderr.flush()
        write_atomically(Paths(root).failure_file, cause + "\n")
    finally:
        os._exit(exit_code)


def crowded_mpi_ranks(environ: Mapping[str, str]) -> str | None:
    """Why this rank of the SDK's MPI driver must not train, or None. The driver gives mpirun
    ``-np process_count_per_node`` for the whole job; the image's ``mpirun`` in front of it
    (sdk/mpirun.py) makes that N on every host, but a launch it leaves as given may still put
    every rank on the master, where the other hosts train nothing: a rank that sees all ranks on its own
    host says so. Pure."""
    if DISTRIBUTED_CONFIG_VAR not in environ or contracts.RANK_VAR in environ:
        return None
    try:
        hosts = int(environ.get(HOST_COUNT_VAR, "1"))
        size = int(environ[contracts.MPI_SIZE_VAR])
        local_size = int(environ[contracts.MPI_LOCAL_SIZE_VAR])
    except (KeyError, ValueError):
        return None
    if hosts < 2 or size != local_size:
        return None
    return (
        f"the SageMaker SDK's MPI driver started all {size} ranks on one of the job's {hosts} hosts; give "
        "MPI(process_count_per_node=<processes per host>) without mpirun options that place ranks (the image "
        "then runs that many on every host), or set process_count_per_node to hosts x processes per host "
        "with mpi_additional_options=['--map-by', 'ppr:<processes per host>:node'], or use SourceCode "
        "without distributed= and the hyperparameters sagemaker_mpi_enabled and "
        "sagemaker_mpi_num_of_processes_per_host"
    )


def may_run_sdk_command(argv: Sequence[str], orig_argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether this interpreter may be the SDK's ``command`` (or started by it): a process of
    ``sm_train.sh`` that is none of the SDK's own scripts, not our launcher, and not one it started. Pure."""
    if SOURCE_DIR_VAR not in environ or _launched(environ):
        return False
    if tuple(orig_argv[1:3]) == _LAUNCHER_ARGV:
        return False
    script = os.path.normpath(argv[0]) if argv else ""
    return f"/{DRIVERS_CHANNEL}/" not in script


def command_refusal(source: SourceCode, settings: JobSettings, environ: Mapping[str, str]) -> str | None:
    """Why the SDK's ``command`` must not run here, or None. Pure."""
    if source.command is None:
        return None
    asked = [engine.entry.enabled_by for engine in settings.enabled_engines if engine.entry.enabled_by]
    if DISTRIBUTED_CONFIG_VAR in environ:  # the SDK runs the command and drops its distributed=
        asked.append("distributed=")
    if not asked:
        return None
    return (
        f"SourceCode(command=...) runs its command once on each host, so the distribution asked for "
        f"({', '.join(asked)}) would not happen; give SourceCode(source_dir=..., entry_script=...) without "
        "command=, and the image's launcher distributes the entry script as the sagemaker_* "
        "hyperparameters ask"
    )


def command_warning(source: SourceCode, hosts: int) -> str | None:
    """What to say before the SDK's ``command`` runs on several hosts unconnected, or None. Pure."""
    if source.command is None or hosts < 2:
        return None
    return (
        f"SourceCode(command=...) runs its command once on each of the job's {hosts} hosts, and this image "
        "connects nothing between them; for a distributed job give SourceCode(entry_script=...) and the "
        "sagemaker_* hyperparameters"
    )


def check_sdk_command(environ: MutableMapping[str, str]) -> None:
    """Before the SDK's ``command`` runs: refuse it, warn, or let it be. Checked once in each top-level
    Python process of the command; the processes those start are not checked again."""
    from sagetrain.errors import ExitCode, SagetrainError
    from sagetrain.preparation import Preparation, prepare_job

    source = read_source_code(Paths(root_from_environ(environ)))
    if source is None or source.command is None:
        return  # an entry-script job's own Python (its pip, say): nothing to decide
    try:
        config = prepare_job(environ, Preparation.DESCRIBE).config
    except SagetrainError:
        return  # the command does not run our launcher: our rules for its configuration do not apply
    refusal = command_refusal(source, config.settings, environ)
    if refusal is not None:
        fail_at_once(refusal, ExitCode.USER_ERROR, environ)
    warning = command_warning(source, len(config.resources.hosts))
    if warning is not None:
        sys.stderr.write(f"sagetrain: {warning}\n")
    # The command's own Python processes (the .pth runs in each) are not checked again.
    environ[HANDED_OVER_VAR] = "command"


def at_interpreter_start(
    argv: Sequence[str], environ: MutableMapping[str, str], orig_argv: Sequence[str] = ()
) -> None:
    """What the ``.pth`` hook does: nothing, unless this interpreter runs one of the SDK's drivers or its
    ``command``."""
    from sagetrain.errors import ExitCode, SagetrainError

    driver = None
    try:
        crowded = crowded_mpi_ranks(environ)
        if crowded is not None:
            # Rank 0 alone fails, once its sentence is written: a rank exiting non-zero first would have
            # mpirun kill rank 0 before it could write it.
            if environ.get(contracts.MPI_RANK_VAR) == "0":
                fail_at_once(crowded, ExitCode.USER_ERROR, environ)
            os._exit(0)
        driver = recognise(argv, environ)
        if driver is SdkDriver.BASIC_SCRIPT:
            hand_over(environ)
        elif driver is SdkDriver.MPI:
            from sagetrain.sdk import mpirun
            from sagetrain.sdk.ssh import prepare_for_mpi_driver

            prepare_for_mpi_driver(environ)
            withhold_our_settings(environ, secret_too=True)
            mpirun.install(environ, contracts.RunDir.from_env(environ))
            # Debian's Python runs a virtualenv's .pth files twice at every start (its site.py adds
            # site-packages in venv() and again in main()): the second call, and the driver's own
            # Python processes, must not exchange keys again.
            environ[HANDED_OVER_VAR] = SdkDriver.MPI.name.lower()
        elif may_run_sdk_command(argv, orig_argv, environ):
            check_sdk_command(environ)
    except SagetrainError as error:
        fail_at_once(error.cause, error.exit_code, environ)
    except Exception as error:  # the SDK's driver must not run half prepared
        what = driver.value if driver is not None else "driver or command"
        fail_at_once(
            f"cannot prepare the SageMaker SDK's {what}: {error!r}", ExitCode.PLATFORM_ERROR, environ
        )
