"""Hyperparameters: typed from their JSON strings, read-only, and the settings the trainer itself reads.

Pure: no TensorFlow, no environment reads. ``SM_HPS`` (what sagemaker_training exports) is already
decoded once; ``hyperparameters.json`` holds one JSON string per key. Both end up as the same typed,
frozen mapping.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

from sagetrain.errors import UserError

# Keys the launcher consumes; never shown to the model module (docs/contracts.md, job environment).
RESERVED_PREFIXES = ("sagemaker_", "sagetrain_")


def decode_value(raw: object) -> object:
    """One hyperparameter as sagemaker_training decodes it: JSON when it parses, else the string itself.

    Lists become tuples and objects read-only mappings, so nothing reachable from ``hp`` can be mutated.
    """
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return raw
    return _freeze(raw)


def _freeze(value: object) -> object:
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    if isinstance(value, dict):
        return MappingProxyType({str(key): _freeze(item) for key, item in value.items()})
    return value


class HyperParameters(Mapping[str, Any]):
    """The read-only ``hp`` mapping given to ``build_model``, ``input_fn`` and ``parse_record``."""

    def __init__(self, values: Mapping[str, object]) -> None:
        self._values = MappingProxyType(
            {key: _freeze(value) for key, value in values.items() if not key.startswith(RESERVED_PREFIXES)}
        )

    @classmethod
    def from_json_strings(cls, raw: Mapping[str, object]) -> HyperParameters:
        """From ``hyperparameters.json``: every value a JSON-encoded string."""
        return cls({key: decode_value(value) for key, value in raw.items()})

    @classmethod
    def from_decoded(cls, decoded: Mapping[str, object]) -> HyperParameters:
        """From ``SM_HPS``: values already decoded once by sagemaker_training; only frozen here."""
        return cls(dict(decoded))

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"HyperParameters({dict(self._values)!r})"


class LrScaling(Enum):
    """How the learning rate follows the number of ranks (the global batch grows with them)."""

    NONE = "none"
    LINEAR = "linear"


@dataclass(frozen=True)
class CompileSettings:
    """What to compile an uncompiled model with; all optional, checked when they are needed."""

    optimizer: str | None
    learning_rate: float | None
    loss: str | None
    metrics: tuple[str, ...]


@dataclass(frozen=True)
class TrainerSettings:
    """The hyperparameters the managed trainer reads. ``batch_size`` is global, summed over all ranks."""

    epochs: int
    batch_size: int
    seed: int
    steps_per_epoch: int | None
    checkpoint_every_epochs: int
    lr_scaling: LrScaling
    warmup_epochs: float
    shuffle_buffer: int
    label_column: str
    compile: CompileSettings

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise UserError(f"hyperparameter 'epochs' must be at least 1, got {self.epochs}.")
        if self.batch_size < 1:
            raise UserError(f"hyperparameter 'batch_size' must be at least 1, got {self.batch_size}.")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise UserError(
                f"hyperparameter 'steps_per_epoch' must be at least 1 when given, got {self.steps_per_epoch}."
            )
        if self.checkpoint_every_epochs < 0:
            raise UserError(
                "hyperparameter 'checkpoint_every_epochs' must be 0 (never) or a positive number of epochs, "
                f"got {self.checkpoint_every_epochs}."
            )
        if self.warmup_epochs < 0:
            raise UserError(f"hyperparameter 'warmup_epochs' must not be negative, got {self.warmup_epochs}.")
        if self.shuffle_buffer < 0:
            raise UserError(
                f"hyperparameter 'shuffle_buffer' must be 0 (no shuffling) or positive, "
                f"got {self.shuffle_buffer}."
            )

    def per_rank_batch_size(self, ranks: int) -> int:
        """``batch_size // ranks``: the global batch is rounded down to a multiple of the rank count."""
        per_rank = self.batch_size // ranks
        if per_rank < 1:
            raise UserError(
                f"hyperparameter 'batch_size' is the global batch over all {ranks} ranks, so it must be at "
                f"least {ranks}; got {self.batch_size}."
            )
        return per_rank


def _integer(hp: Mapping[str, object], key: str, default: int | None) -> int | None:
    value = hp.get(key, default)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise UserError(f"hyperparameter {key!r} must be an integer, got {value!r}.")


def _number(hp: Mapping[str, object], key: str, default: float | None) -> float | None:
    value = hp.get(key, default)
    if value is None:
        return None
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value)
    # JSON's Infinity and NaN (and "inf" as text) parse as floats but mean nothing as a rate or a count.
    if number is None or not math.isfinite(number):
        raise UserError(f"hyperparameter {key!r} must be a finite number, got {value!r}.")
    return number


def _text(hp: Mapping[str, object], key: str, default: str | None) -> str | None:
    value = hp.get(key, default)
    if value is None or isinstance(value, str):
        return value
    raise UserError(f"hyperparameter {key!r} must be a string, got {value!r}.")


def _names(hp: Mapping[str, object], key: str) -> tuple[str, ...]:
    value = hp.get(key, ())
    if isinstance(value, str):
        # "accuracy" and "accuracy,auc" are both common ways to spell it in a console form.
        return tuple(name.strip() for name in value.split(",") if name.strip())
    if isinstance(value, tuple) and all(isinstance(name, str) for name in value):
        return value
    raise UserError(f"hyperparameter {key!r} must be a metric name or a list of names, got {value!r}.")


def _required_int(hp: Mapping[str, object], key: str, default: int) -> int:
    value = _integer(hp, key, default)
    return default if value is None else value


def settings_from(hp: Mapping[str, object]) -> TrainerSettings:
    """The trainer's settings from the typed hyperparameters; every error names the key and the value."""
    scaling = _text(hp, "lr_scaling", LrScaling.NONE.value)
    try:
        lr_scaling = LrScaling(scaling)
    except ValueError:
        raise UserError(
            f"hyperparameter 'lr_scaling' must be one of {[item.value for item in LrScaling]}, "
            f"got {scaling!r}."
        ) from None
    return TrainerSettings(
        epochs=_required_int(hp, "epochs", 1),
        batch_size=_required_int(hp, "batch_size", 32),
        seed=_required_int(hp, "seed", 0),
        steps_per_epoch=_integer(hp, "steps_per_epoch", None),
        checkpoint_every_epochs=_required_int(hp, "checkpoint_every_epochs", 1),
        lr_scaling=lr_scaling,
        warmup_epochs=_number(hp, "warmup_epochs", 0.0) or 0.0,
        shuffle_buffer=_required_int(hp, "shuffle_buffer", 10_000),
        label_column=_text(hp, "label_column", "label") or "label",
        compile=CompileSettings(
            optimizer=_text(hp, "optimizer", None),
            learning_rate=_number(hp, "learning_rate", None),
            loss=_text(hp, "loss", None),
            metrics=_names(hp, "metrics"),
        ),
    )
