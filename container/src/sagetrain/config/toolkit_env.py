"""The ``SM_*`` variables exactly as sagemaker_training writes them, made by sagemaker_training itself
without its side effects, and the fields in them that differ from host to host. Pure but for
``toolkit_env_vars``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from sagetrain.config.hyperparameters import PROGRAM_VAR
from sagetrain.config.job import JobConfig
from sagetrain.config.paths import ROOT_ENV
from sagetrain.config.resources import DEFAULT_INSTANCE_GROUP, LOCAL_INSTANCE_TYPE, group_hosts
from sagetrain.contracts import HostFacts

TRAINING_ENV_VAR = "SM_TRAINING_ENV"
# The job's identity, which SageMaker (and its SDK's local mode: the name) sets in every container.
TRAINING_JOB_NAME_VAR = "TRAINING_JOB_NAME"
TRAINING_JOB_ARN_VAR = "TRAINING_JOB_ARN"
HYPERPARAMETERS_VAR = "SM_HPS"
HYPERPARAMETER_VAR_PREFIX = "SM_HP_"
NUM_CPUS_VAR = "SM_NUM_CPUS"
# sagemaker_training's logger (its logging_config.get_logger()).
TOOLKIT_LOGGER = "sagemaker-training-toolkit"
CURRENT_HOST_VAR = "SM_CURRENT_HOST"
MODEL_DIR_VAR = "SM_MODEL_DIR"
# The toolkit's log level (sagemaker_container_log_level, settled by config/): what the image's own lines
# in every process of the job follow.
TOOLKIT_LOG_LEVEL_VAR = "SM_LOG_LEVEL"


def sm_value(value: Any) -> str:
    """A value as sagemaker_training's to_env_vars writes it."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def with_fields(environ: Mapping[str, str], fields: Mapping[str, Any]) -> dict[str, str]:
    """The variables that change when the toolkit's ``fields`` (``num_gpus``, ``current_host``...) take
    these values: ``SM_<FIELD>`` for each, and ``SM_TRAINING_ENV`` (when ``environ`` has one holding a
    JSON object) with the same fields and ``is_master`` following ``current_host``."""
    updates = {f"SM_{name.upper()}": sm_value(value) for name, value in fields.items()}
    training_env = _json_object(environ.get(TRAINING_ENV_VAR))
    if training_env is not None:
        training_env.update(fields)
        if "current_host" in fields and "master_hostname" in training_env:
            training_env["is_master"] = training_env["master_hostname"] == fields["current_host"]
        updates[TRAINING_ENV_VAR] = sm_value(training_env)
    return updates


def _json_object(text: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(text or "")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def hyperparameters_withheld(
    environ: Mapping[str, str], prefix: str
) -> tuple[dict[str, str], tuple[str, ...]]:
    """(variables to set, variables to remove) so that no hyperparameter variable (``SM_HPS``,
    ``SM_HP_<NAME>``, the hyperparameters in ``SM_TRAINING_ENV``) carries a key starting with ``prefix``.
    Pure."""
    updates: dict[str, str] = {}
    hyperparameters = _json_object(environ.get(HYPERPARAMETERS_VAR))
    if hyperparameters is not None:
        updates[HYPERPARAMETERS_VAR] = sm_value(
            {k: v for k, v in hyperparameters.items() if not k.startswith(prefix)}
        )
    training_env = _json_object(environ.get(TRAINING_ENV_VAR))
    if training_env is not None and isinstance(training_env.get("hyperparameters"), dict):
        kept = {k: v for k, v in training_env["hyperparameters"].items() if not k.startswith(prefix)}
        updates[TRAINING_ENV_VAR] = sm_value({**training_env, "hyperparameters": kept})
    removed = tuple(name for name in environ if name.startswith(HYPERPARAMETER_VAR_PREFIX + prefix.upper()))
    return updates, removed


def own_host_variables(
    environ: Mapping[str, str],
    current_host: str,
    resource_config: Mapping[str, Any] | None = None,
    facts: HostFacts | None = None,
) -> dict[str, str]:
    """The variables that describe the host a process runs on, for ``current_host``: SM_CURRENT_HOST,
    CURRENT_HOST and, from that host's own ``resource_config`` (resourceconfig.json), SM_RESOURCE_CONFIG,
    SM_CURRENT_INSTANCE_TYPE/GROUP/GROUP_HOSTS; from its ``facts``, SM_NUM_GPUS and SM_NUM_CPUS; the
    same fields inside SM_TRAINING_ENV. Values as sagemaker_training formats them. Pure."""
    fields: dict[str, Any] = {"current_host": current_host}
    if resource_config is not None:
        fields.update(
            resource_config=dict(resource_config),
            current_instance_type=str(resource_config.get("current_instance_type", LOCAL_INSTANCE_TYPE)),
            current_instance_group=str(resource_config.get("current_group_name", DEFAULT_INSTANCE_GROUP)),
            current_instance_group_hosts=group_hosts(resource_config),
        )
    if facts is not None:
        fields.update(num_gpus=facts.num_gpus, num_cpus=facts.num_cpus)
    return {**with_fields(environ, fields), "CURRENT_HOST": current_host}


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
        # The toolkit takes the program from this variable before the hyperparameter: ours decided it.
        os.environ.pop(PROGRAM_VAR, None)
        from sagemaker_training import environment

        # Its INFO lines ("No GPUs detected", "No Neurons detected") say nothing a job needs.
        logging.getLogger(TOOLKIT_LOGGER).setLevel(logging.WARNING)

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
