"""Reading the JSON configuration files with errors that name the file and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sagetrain.errors import UserError


def read_json_object(path: Path, *, required: bool = True) -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when the file is optional and absent."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if not required:
            return {}
        raise UserError(
            f"{path} is missing; SageMaker writes it at job start, so check the mounted /opt/ml tree"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path} cannot be read: {error}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); fix the file"
        ) from None
    if not isinstance(value, dict):
        raise UserError(f"{path} must hold a JSON object, found {type(value).__name__}")
    return value
