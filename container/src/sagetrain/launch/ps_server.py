"""A TensorFlow parameter server task: ``python -m sagetrain.launch.ps_server`` with TF_CONFIG set.

Runs in its own process so the entry itself never imports TensorFlow. A TensorFlow gRPC server runs any op
a peer sends it, so this process gets no more than serving needs (least privilege): it runs as a user of
its own (``PS_USER``, made in the image), in no group of root's; its environment is a short list
(``parameter_server_env``), without the job's credentials (the AWS keys, the container-credentials URIs
through which SageMaker hands a job its role) or secrets; it cannot read the secret channel or the run
folder's secrets (launch/run_dir.py), and can write only its scratch folder (its home and TMPDIR) and what
every user may (``/tmp``, ``/dev/shm``). Its port, as every port of the job, takes connections from the
job's hosts alone (launch/members.py).
"""

from __future__ import annotations

import json
import logging
import os
import pwd
from collections.abc import Mapping
from pathlib import Path

from sagetrain import contracts
from sagetrain.launch.process import RunAs
from sagetrain.plan.tf_config import TF_CONFIG_VAR, TaskType
from sagetrain.redact import stays_on_host

log = logging.getLogger(__name__)

# The image's user for parameter server tasks (the Dockerfile makes it).
PS_USER = "sagetrain-ps"
# What the task keeps of the job's environment: what finds programs and reads text, the interpreter's
# output, the preloaded libraries (the members-only one among them) and the run folder the members-only
# library reads; TensorFlow's, gRPC's and the thread pools' own settings. Never what stays on a host.
_KEPT_NAMES = frozenset(
    {"PATH", "LANG", "LC_ALL", "TZ", "PYTHONUNBUFFERED", "VIRTUAL_ENV", contracts.PRELOAD_VAR,
     contracts.RUN_DIR_VAR}
)  # fmt: skip
_KEPT_PREFIXES = ("TF_", "GRPC_", "OMP_", "KMP_")


def parameter_server_env(job_env: Mapping[str, str], tf_config: str, scratch: Path) -> dict[str, str]:
    """The task's whole environment: what it keeps of ``job_env``, its TF_CONFIG, its scratch folder as its
    home and TMPDIR. Pure."""
    kept = {
        name: value
        for name, value in job_env.items()
        if (name in _KEPT_NAMES or name.startswith(_KEPT_PREFIXES)) and not stays_on_host(name)
    }
    return {**kept, TF_CONFIG_VAR: tf_config, "HOME": str(scratch), "TMPDIR": str(scratch)}


def identity_of(euid: int, entry: pwd.struct_passwd | None) -> RunAs | None:
    """The user the task runs as: ``entry``'s when this launcher is root and the image has it; None (the
    launcher's own user) otherwise. Pure."""
    if euid != 0 or entry is None:
        return None
    return RunAs(entry.pw_uid, entry.pw_gid)


def parameter_server_identity() -> RunAs | None:
    """``PS_USER``, as this host's user database has it; None, with a warning, when the task cannot run as
    it (a launcher that is not root, an image without it)."""
    try:
        entry: pwd.struct_passwd | None = pwd.getpwnam(PS_USER)
    except KeyError:
        entry = None
    identity = identity_of(os.geteuid(), entry)
    if identity is None:
        why = "this launcher does not run as root" if entry is not None else f"there is no user {PS_USER}"
        log.warning(
            "the parameter server task runs as the launcher's own user (%s), with what that user may read "
            "and write", why,
        )  # fmt: skip
    return identity


def prepare_scratch(folder: Path, identity: RunAs | None) -> None:
    """The task's scratch folder, its user's alone."""
    folder.mkdir(parents=True, exist_ok=True)
    if identity is not None:
        os.chown(folder, identity.uid, identity.gid)
    folder.chmod(0o700)


def main() -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # two TF processes must not share a GPU
    import tensorflow as tf

    config = json.loads(os.environ[TF_CONFIG_VAR])
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=TaskType.PS.value,
        task_index=config["task"]["index"],
        protocol="grpc",
        start=True,
    )
    server.join()


if __name__ == "__main__":
    main()
