"""The ``SM_*`` variables as sagemaker_training writes them, and changing fields in them. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


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
    try:
        training_env = json.loads(environ.get("SM_TRAINING_ENV", ""))
    except ValueError:
        training_env = None
    if isinstance(training_env, dict):
        training_env.update(fields)
        if "current_host" in fields and "master_hostname" in training_env:
            training_env["is_master"] = training_env["master_hostname"] == fields["current_host"]
        updates["SM_TRAINING_ENV"] = sm_value(training_env)
    return updates
