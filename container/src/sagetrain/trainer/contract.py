"""The Keras model module contract: load the module, call its functions, check what they return.

Every failure is one sentence naming the module, the function and, where there is one, the channel.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagetrain.errors import UserError
from sagetrain.legacy_keras import TF_USE_LEGACY_KERAS_VAR
from sagetrain.trainer.hyperparameters import CompileSettings


@dataclass(frozen=True)
class ModelModule:
    path: Path
    build_model: Callable[..., Any]
    input_fn: Callable[..., Any] | None
    parse_record: Callable[..., Any] | None


def uses_legacy_keras(environ: Mapping[str, str]) -> bool:
    return environ.get(TF_USE_LEGACY_KERAS_VAR) == "1"


def keras_api(environ: Mapping[str, str]) -> types.ModuleType:
    """Keras 3 by default; tf-keras (Keras 2) when TF_USE_LEGACY_KERAS=1, as TensorFlow itself decides."""
    if uses_legacy_keras(environ):
        import tf_keras

        return tf_keras
    import keras

    return keras


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
# TensorFlow op errors wrap their message: "{{function_node …}} message\n\t [[{{node …}}]] [Op:…] name: ";
# an error inside a traced function's input pipeline adds "[[IteratorGetNext]]".
_TF_DECORATION = re.compile(
    r"\{\{function_node [^}]*\}\}\s*"  # the function that ran the op
    r"|\s*\[\[\{\{node [^}]*\}\}\]\]"  # the node
    r"|\s*\[\[[A-Za-z_][\w./:-]*\]\]"  # the calling node, in a traced function
    r"|\s*\[Op:[^\]]*\](\s*name:.*)?"  # the op type and name
)
# tf.data's prefix for an error in a function it maps: where in the pipeline, not what went wrong.
_TF_DATA_FUNCTION = re.compile(
    r"^Error in user-defined function passed to .*? transformation with iterator: \S+: "
)


def describe_exception(error: BaseException) -> str:
    """``Type: message`` on one line; Keras colours its messages for terminals, files get plain text."""
    return describe_message(type(error).__name__, str(error))


def describe_message(kind: str, message: str) -> str:
    """``kind: message`` on one line, from the line of ``message`` that says what went wrong."""
    text = _TF_DECORATION.sub("", _ANSI_ESCAPE.sub("", message))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return kind
    if lines[0].endswith(":"):
        # TensorFlow's traced errors start with "in user code:" or "Graph execution error:" and end with
        # the actual message.
        return f"{kind}: {_TF_DATA_FUNCTION.sub('', lines[-1])}"
    if lines[0].startswith("Exception encountered when calling") and len(lines) > 1:
        # Keras 3 layer errors put the cause on the line after this header.
        return f"{kind}: {lines[1]}"
    return f"{kind}: {_TF_DATA_FUNCTION.sub('', lines[0])}"


def load_module(path: Path) -> ModelModule:
    if not path.is_file():
        raise UserError(f"model module {path} does not exist.")
    # Users import helpers that sit next to their module, as script mode allows.
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise UserError(f"model module {path} cannot be imported (not a Python file?).")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise UserError(f"importing {path.name} failed: {describe_exception(error)}.") from error
    functions = {}
    for name in ("build_model", "input_fn", "parse_record"):
        value = getattr(module, name, None)
        if value is not None and not callable(value):
            raise UserError(f"{name} in {path.name} must be a function, got {type(value).__name__}.")
        functions[name] = value
    if functions["build_model"] is None:
        raise UserError(f"{path.name} defines no build_model(hp); a Keras model module must define it.")
    return ModelModule(path, functions["build_model"], functions["input_fn"], functions["parse_record"])


def call_user(
    module: ModelModule, name: str, function: Callable[..., Any], *args: object, about: str = ""
) -> Any:
    """Call a module function; its exceptions become one user-error sentence."""
    try:
        return function(*args)
    except UserError:
        raise
    except Exception as error:
        context = f" for {about}" if about else ""
        raise UserError(
            f"{name} in {module.path.name} raised{context}: {describe_exception(error)}."
        ) from error


def build_and_compile(module: ModelModule, hp: Mapping[str, object], settings: CompileSettings) -> Any:
    """``build_model(hp)``, checked to be a model of the active Keras, compiled from hp when it is not."""
    keras = keras_api(os.environ)
    model = call_user(module, "build_model", module.build_model, hp)
    if not isinstance(model, keras.Model):
        other = "tf_keras" if not uses_legacy_keras(os.environ) else "keras (Keras 3)"
        hint = (
            f" It looks like a {other} model: set {TF_USE_LEGACY_KERAS_VAR}=1 for tf_keras, or build it with "
            "Keras 3."
            if type(model).__module__.split(".")[0] in {"tf_keras", "keras"}
            else ""
        )
        raise UserError(
            f"build_model in {module.path.name} returned {type(model).__name__}, "
            f"not a {keras.__name__}.Model.{hint}"
        )
    if getattr(model, "optimizer", None) is None:
        _compile_from_hyperparameters(model, module, settings, keras)
    if getattr(model, "loss", None) is None and not getattr(model, "compiled_loss", None):
        raise UserError(
            f"build_model in {module.path.name} compiled the model without a loss; pass loss= to compile() "
            f"or set the hyperparameter 'loss'."
        )
    return model


def _compile_from_hyperparameters(
    model: Any, module: ModelModule, settings: CompileSettings, keras: Any
) -> None:
    if settings.optimizer is None or settings.loss is None:
        raise UserError(
            f"build_model in {module.path.name} returned an uncompiled model and the hyperparameters name "
            f"no {'optimizer' if settings.optimizer is None else 'loss'!r}; compile it in build_model or set "
            f"the hyperparameters 'optimizer' and 'loss'."
        )
    try:
        # By name: tf_keras.optimizers.get() of a config dict returns a legacy optimizer.
        optimizer = keras.optimizers.get(settings.optimizer)
        if settings.learning_rate is not None:
            optimizer.learning_rate = settings.learning_rate
    except (ValueError, TypeError) as error:
        raise UserError(
            f"hyperparameter 'optimizer' = {settings.optimizer!r} is not a Keras optimizer "
            f"({describe_exception(error)})."
        ) from None
    try:
        model.compile(optimizer=optimizer, loss=settings.loss, metrics=list(settings.metrics))
    except (ValueError, TypeError) as error:
        raise UserError(
            f"compiling the model of {module.path.name} with loss={settings.loss!r}, "
            f"metrics={list(settings.metrics)} failed: {describe_exception(error)}."
        ) from None
