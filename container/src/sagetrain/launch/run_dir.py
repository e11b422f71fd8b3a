"""This host's run directory, written before the engine starts (contracts.RunDir says what each file is):
the host's facts, its key and the values to mask, the variables that stay on this host, and what is too
long to pass to a rank any other way. Other users (the parameter server task's) may pass through the
folder to the files meant for them, never list it or read what holds a secret; nor may they read the
channel holding the job's secret."""

from __future__ import annotations

import json
import logging
import shutil
from contextlib import suppress
from pathlib import Path

from sagetrain.atomic_file import write_atomically
from sagetrain.contracts import FILE_VAR_SUFFIX, RUN_DIR_VAR, RunDir
from sagetrain.errors import PlatformError
from sagetrain.launch.members import missing_filter_warning
from sagetrain.launch.spec import MAX_ENV_STRING_BYTES, JobSpec
from sagetrain.redact import stays_on_host

log = logging.getLogger(__name__)

# The run folder: its owner's; others may only pass through it to the files meant for them.
RUN_DIR_MODE = 0o711
# The secret channel's folder and the ranks' shared listings: their owner's alone.
PRIVATE_FOLDER_MODE = 0o700


def keep_secret_channel_private(folder: Path) -> None:
    """Make the secret channel's folder its owner's alone (the launcher read the secret before): no other
    user of this host (the parameter server task's) reads the secret. Warns when it cannot."""
    try:
        folder.chmod(PRIVATE_FOLDER_MODE)
    except OSError as error:
        log.warning(
            "cannot make %s readable by its owner alone (%s): processes of other users on this host could "
            "read the job's secret", folder, error.strerror or error,
        )  # fmt: skip


def empty_listings(run_dir: RunDir) -> None:
    """An empty folder for this start's ranks to share their channel listings in, their owner's alone: a
    listing left by an earlier start in this container may be of other files."""
    folder = run_dir.listings
    try:
        with suppress(FileNotFoundError):
            shutil.rmtree(folder)
        folder.mkdir(mode=PRIVATE_FOLDER_MODE)
        folder.chmod(PRIVATE_FOLDER_MODE)  # whatever the umask
    except OSError as error:
        raise PlatformError(
            f"cannot make an empty folder {folder} ({error.strerror or error}); {RUN_DIR_VAR} must name a "
            f"folder this host can write"
        ) from None


def write_run_dir(spec: JobSpec) -> None:
    """Everything of ``spec`` that this host's rank launchers read from its run directory."""
    run_dir = spec.run_dir
    run_dir.root.mkdir(parents=True, exist_ok=True)
    run_dir.root.chmod(RUN_DIR_MODE)
    if spec.secret_channel is not None:
        keep_secret_channel_private(spec.secret_channel)
    warning = missing_filter_warning(spec.plan.launch.members_only_ports, spec.members_filter, spec.env)
    if warning is not None:
        log.warning("%s", warning)
    empty_listings(run_dir)
    run_dir.write_host_facts(spec.host_facts)
    run_dir.write_host_env({name: value for name, value in spec.env.items() if stays_on_host(name)})
    run_dir.write_host_key(spec.secrets.membership.host_key(spec.plan.current_host))
    run_dir.write_masked(spec.secrets.redactor)
    if spec.args_file_arguments:
        write_atomically(run_dir.args_file, json.dumps(list(spec.args_file_arguments)), private=True)
        log.warning(
            "the program's arguments are too long for mpirun's command line: the rank launcher reads them "
            "from %s", run_dir.args_file,
        )  # fmt: skip
    for name, value in spec.env_files.items():
        path = run_dir.env_file(name)
        write_atomically(path, value, private=True)
        log.warning(
            "%s is %d bytes, too long for the environment (at most %d): the program finds it in the file "
            "%s%s names (%s)", name, len(value.encode()), MAX_ENV_STRING_BYTES, name, FILE_VAR_SUFFIX, path,
        )  # fmt: skip
