"""This host's run directory, written before the engine starts (contracts.RunDir says what each file is):
the host's facts, its key and the values to mask, the variables that stay on this host, and what is too
long to pass to a rank any other way."""

from __future__ import annotations

import json
import logging

from sagetrain.atomic_file import write_atomically
from sagetrain.contracts import FILE_VAR_SUFFIX
from sagetrain.launch.spec import MAX_ENV_STRING_BYTES, JobSpec
from sagetrain.redact import stays_on_host

log = logging.getLogger(__name__)


def write_run_dir(spec: JobSpec) -> None:
    """Everything of ``spec`` that this host's rank launchers read from its run directory."""
    run_dir = spec.run_dir
    run_dir.write_host_facts(spec.host_facts)
    run_dir.write_host_env({name: value for name, value in spec.env.items() if stays_on_host(name)})
    run_dir.write_host_key(spec.secrets.membership.host_key(spec.plan.current_host))
    run_dir.write_masked(spec.secrets.redactor)
    if spec.args_file_arguments:
        write_atomically(run_dir.args_file, json.dumps(list(spec.args_file_arguments)))
        log.warning(
            "the program's arguments are too long for mpirun's command line: the rank launcher reads them "
            "from %s", run_dir.args_file,
        )  # fmt: skip
    for name, value in spec.env_files.items():
        path = run_dir.env_file(name)
        write_atomically(path, value)
        log.warning(
            "%s is %d bytes, too long for the environment (at most %d): the program finds it in the file "
            "%s%s names (%s)", name, len(value.encode()), MAX_ENV_STRING_BYTES, name, FILE_VAR_SUFFIX, path,
        )  # fmt: skip
