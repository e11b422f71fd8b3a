"""The toolkit's hyperparameters → command-line arguments rule, imported without its side effects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def to_cmd_args(hyperparameters: Mapping[str, Any]) -> list[str]:
    """Exactly sagemaker_training.mapping.to_cmd_args (user scripts parse these as under AWS's images)."""
    from sagemaker_training import mapping

    return [str(arg) for arg in mapping.to_cmd_args(dict(hyperparameters))]
