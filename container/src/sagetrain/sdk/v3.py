"""The SageMaker Python SDK v3's own drivers (``ModelTrainer`` with ``SourceCode``), met in this image:
what an interpreter of the SDK's can be, in one registry, and what the image does about each.

With ``SourceCode`` the SDK replaces the image's entrypoint with ``/bin/bash -c … sm_train.sh`` and ships
its drivers in the channel ``sm_drivers``; ``sm_train.sh`` then runs one of them with the image's
``python3`` (``SdkDriver``, in the order they are recognised):

- ``CROWDED_RANK``: a rank the MPI driver's ``mpirun`` started where every rank of a job of several hosts
  ran on one host: instead of training one host's share, rank 0 fails at once saying what to do, the
  others end.
- ``BASIC_SCRIPT``, ``distributed_drivers/basic_script_driver.py`` (no ``distributed=``): runs the entry
  script once per host, whatever the hyperparameters ask. This image hands that process over to its own
  launcher (``train``), which reads the program from the SDK's ``sourcecode.json`` and decides the
  distribution from the ``sagemaker_*`` hyperparameters (or chooses), exactly as without ``SourceCode``.
- ``MPI``, ``distributed_drivers/mpi_driver.py`` (``distributed=MPI()``): starts ``/usr/sbin/sshd -D``,
  connects with paramiko and the system ``ssh``, then runs ``mpirun`` over ssh. Before it starts, this
  image writes ssh keys made for this job (``sdk/ssh.py``) and puts its own ``mpirun`` first on the
  driver's PATH, so that ``process_count_per_node`` means processes on each host (``sdk/mpirun.py``).
- ``COMMAND``, ``SourceCode(command=…)``: ``sm_train.sh`` runs the command itself, once on every host, and
  the SDK drops ``distributed=``. When the job asks for a distribution (a ``sagemaker_*_enabled``
  hyperparameter or ``distributed=``), the command's first Python process fails at once saying what to
  do, instead of training one unconnected model per host; on several hosts without one, it warns once.

Each entry of ``REGISTRY`` says how its process is recognised (pure: the script the interpreter starts
with, the SDK's variables) and what prepares it; the preparation returns what becomes of the process
(``Proceed``, ``Replace``, ``End``), which ``at_interpreter_start`` alone carries out. Adding a driver path:
a member of ``SdkDriver``, its entry here, its preparation (here, or a module of its own under ``sdk/``);
and, only if its process shows none of the signs the interpreter-start hook looks for
(sagetrain/sdk/__init__.py), that sign there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from sagetrain import contracts
from sagetrain.config.paths import Paths, root_from_environ
from sagetrain.config.sdk_names import (
    DISTRIBUTED_CONFIG_VAR,
    DRIVERS_CHANNEL,
    DRIVERS_FOLDER,
    HOST_COUNT_VAR,
    SOURCE_DIR_VAR,
)
from sagetrain.config.sdk_source_code import SourceCode, read_source_code
from sagetrain.errors import ExitCode, SagetrainError

if TYPE_CHECKING:
    from sagetrain.config.hyperparameters import JobSettings
    from sagetrain.redact import Redactor

# Our launcher: what the image runs when started without arguments.
TRAIN = "/usr/local/bin/train"
# Set in the environment of an SDK process once prepared (the launcher that took over from the script
# driver, the MPI driver, the command), to its driver's name: that process, and everything it starts, is
# never taken for a driver again. Debian's Python runs a virtualenv's .pth files twice at every start (its
# site.py adds site-packages in venv() and again in main()): the hook's second call must not prepare again.
HANDED_OVER_VAR = "SAGETRAIN_SDK_DRIVER"
# Variables a process started by our launcher or by mpirun has: never a driver's process.
_LAUNCHED_VARS = (contracts.RANK_VAR, contracts.MPI_RANK_VAR, contracts.PMI_RANK_VAR, HANDED_OVER_VAR)
# The launcher's own module (`train` runs ``python -m sagetrain train``): never the SDK's command.
_LAUNCHER_ARGV = ("-m", "sagetrain")


class SdkDriver(Enum):
    """What of the SDK's an interpreter in this image may be running. The value marks a prepared process
    (``HANDED_OVER_VAR``)."""

    CROWDED_RANK = "crowded_rank"
    BASIC_SCRIPT = "basic_script"
    MPI = "mpi"
    COMMAND = "command"

    @property
    def entry(self) -> SdkDriverEntry:
        return REGISTRY[self]


@dataclass(frozen=True)
class Proceed:
    """The SDK's process goes on; ``marked``: as prepared (``HANDED_OVER_VAR``), it and the processes it
    starts are not prepared again."""

    marked: bool = True


@dataclass(frozen=True)
class Replace:
    """This process becomes ``program`` (run with no arguments) with ``env``, marked as prepared."""

    program: str
    env: Mapping[str, str]


@dataclass(frozen=True)
class End:
    """This process ends at once with ``exit_code``; a ``cause`` is first written as the failure file's first
    line and to stderr, masked with ``redactor`` (None: as the job's files read, leniently)."""

    exit_code: int
    cause: str = ""
    redactor: Redactor | None = None


Outcome = Proceed | Replace | End
Recogniser = Callable[[Sequence[str], Sequence[str], Mapping[str, str]], bool]


@dataclass(frozen=True)
class SdkDriverEntry:
    # How a failure to prepare it names it.
    name: str
    # What the image does before the process goes on: may change its environment (``environ``).
    prepare: Callable[[MutableMapping[str, str]], Outcome]
    # The driver script it runs, by its file name in the drivers channel's folder; else ``recognised_by``.
    script: str | None = None
    # Whether (argv, orig_argv, environ) is its process. Pure.
    recognised_by: Recogniser | None = None

    def recognises(self, argv: Sequence[str], orig_argv: Sequence[str], environ: Mapping[str, str]) -> bool:
        if self.script is not None:
            return _runs_driver_script(argv, environ, self.script)
        return self.recognised_by is not None and self.recognised_by(argv, orig_argv, environ)


def _launched(environ: Mapping[str, str]) -> bool:
    return any(name in environ for name in _LAUNCHED_VARS)


def _runs_driver_script(argv: Sequence[str], environ: Mapping[str, str], script: str) -> bool:
    """Whether this interpreter was started to run the driver ``script`` of this job's drivers channel.
    Pure: a name check."""
    if not argv or _launched(environ):
        return False
    return os.path.normpath(argv[0]) == str(_drivers_dir(environ) / DRIVERS_FOLDER / script)


def recognise(argv: Sequence[str], environ: Mapping[str, str]) -> SdkDriver | None:
    """The SDK driver script this interpreter was started to run, or None. Pure."""
    scripted = (driver for driver in SdkDriver if driver.entry.script is not None)
    return next((driver for driver in scripted if driver.entry.recognises(argv, (), environ)), None)


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


def hand_over(environ: MutableMapping[str, str]) -> Outcome:
    """The SDK's script driver: replaced with the image's launcher."""
    withhold_our_settings(environ, secret_too=False)  # the launcher reads the secret's variable
    sys.stderr.write(
        "sagetrain: the SageMaker SDK's script driver started; the image's launcher runs the job instead "
        "and distributes it as the sagemaker_* hyperparameters ask (or as it chooses without them)\n"
    )
    return Replace(TRAIN, environ)


def prepare_mpi_driver(environ: MutableMapping[str, str]) -> Outcome:
    """The SDK's MPI driver: the job's ssh keys exchanged and written, our settings withheld, our
    ``mpirun`` first on its PATH."""
    from sagetrain.sdk import mpirun
    from sagetrain.sdk.ssh import prepare_for_mpi_driver

    prepare_for_mpi_driver(environ)
    withhold_our_settings(environ, secret_too=True)
    mpirun.install(environ, contracts.RunDir.from_env(environ))
    return Proceed()


def end_crowded_rank(environ: MutableMapping[str, str]) -> Outcome:
    """Rank 0 alone fails, once its sentence is written: a rank exiting non-zero first would have mpirun
    kill rank 0 before it could write it."""
    crowded = crowded_mpi_ranks(environ)
    if crowded is not None and environ.get(contracts.MPI_RANK_VAR) == "0":
        return End(ExitCode.USER_ERROR, crowded)
    return End(ExitCode.SUCCESS)


def check_sdk_command(environ: MutableMapping[str, str]) -> Outcome:
    """Before the SDK's ``command`` runs: refuse it, warn, or let it be. Checked once in each top-level
    Python process of the command; the processes those start are not checked again (marked)."""
    from sagetrain.preparation import Preparation, prepare_job

    source = read_source_code(Paths(root_from_environ(environ)))
    if source is None or source.command is None:
        return Proceed(marked=False)  # an entry-script job's own Python (its pip, say): nothing to decide
    try:
        job = prepare_job(environ, Preparation.DESCRIBE)
    except SagetrainError:
        # The command does not run our launcher: our rules for its configuration do not apply.
        return Proceed(marked=False)
    refusal = command_refusal(source, job.config.settings, environ)
    if refusal is not None:
        return End(ExitCode.USER_ERROR, refusal, job.secrets.redactor)
    warning = command_warning(source, len(job.config.resources.hosts))
    if warning is not None:
        sys.stderr.write(f"sagetrain: {warning}\n")
    return Proceed()


def _crowded(argv: Sequence[str], orig_argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    return crowded_mpi_ranks(environ) is not None


REGISTRY: dict[SdkDriver, SdkDriverEntry] = {
    SdkDriver.CROWDED_RANK: SdkDriverEntry("MPI driver's rank", end_crowded_rank, recognised_by=_crowded),
    SdkDriver.BASIC_SCRIPT: SdkDriverEntry(
        "basic_script_driver.py", hand_over, script="basic_script_driver.py"
    ),
    SdkDriver.MPI: SdkDriverEntry("mpi_driver.py", prepare_mpi_driver, script="mpi_driver.py"),
    SdkDriver.COMMAND: SdkDriverEntry("command", check_sdk_command, recognised_by=may_run_sdk_command),
}


def at_interpreter_start(
    argv: Sequence[str], environ: MutableMapping[str, str], orig_argv: Sequence[str] = ()
) -> None:
    """Nothing, unless this interpreter runs one of the SDK's drivers or its ``command``: then that
    path's preparation, and what it says becomes of the process. A preparation that fails ends the process
    saying why: the SDK's driver must not run half prepared."""
    driver = next((each for each in SdkDriver if each.entry.recognises(argv, orig_argv, environ)), None)
    if driver is None:
        return
    try:
        outcome = driver.entry.prepare(environ)
    except SagetrainError as error:
        outcome = End(error.exit_code, error.cause)
    except Exception as error:  # reported: the process ends saying what went wrong
        outcome = End(
            ExitCode.PLATFORM_ERROR, f"cannot prepare the SageMaker SDK's {driver.entry.name}: {error!r}"
        )
    carry_out(driver, outcome, environ)


def carry_out(driver: SdkDriver, outcome: Outcome, environ: MutableMapping[str, str]) -> None:
    """What ``outcome`` says becomes of this process (``driver``'s)."""
    if isinstance(outcome, Proceed):
        if outcome.marked:
            environ[HANDED_OVER_VAR] = driver.value
    elif isinstance(outcome, Replace):
        sys.stderr.flush()
        os.execve(outcome.program, [outcome.program], {**outcome.env, HANDED_OVER_VAR: driver.value})
    elif outcome.cause:
        fail_at_once(outcome.cause, outcome.exit_code, environ, outcome.redactor)
    else:
        os._exit(outcome.exit_code)


def fail_at_once(
    cause: str, exit_code: int, environ: Mapping[str, str], redactor: Redactor | None = None
) -> None:
    """Write ``cause`` as the failure file's first line and to stderr, with the job's secrets masked
    (``redactor``: as this process read them; None: read leniently now, the one way a process that did not
    prepare the job reads them), and end this process."""
    from sagetrain.atomic_file import write_atomically
    from sagetrain.config.job_secret import read_job_secrets

    try:
        root = root_from_environ(environ)
        redact = redactor if redactor is not None else read_job_secrets(root, environ).redactor
        cause = redact(cause)
        sys.stderr.write(f"sagetrain: {cause}\n")
        sys.stderr.flush()
        write_atomically(Paths(root).failure_file, cause + "\n")
    finally:
        os._exit(exit_code)
