"""The legacy-Keras switch: with ``SAGETRAIN_LEGACY_KERAS=1`` both ``import keras`` and ``tf.keras`` give
tf-keras (Keras 2), for scripts that need APIs Keras 3 removed (``ImageDataGenerator``,
``keras.optimizers.legacy``, ``fit_generator``, loading a SavedModel with ``load_model``,
ParameterServerStrategy with ``fit``; report/keras_2_code.py lists them).

The image calls ``install_if_requested`` at every interpreter start (a ``.pth`` file in site-packages, so
it holds for the user's script, every MPI rank and any subprocess, whoever starts them). Without the
variable it does nothing; it imports nothing heavy either way: Keras loads when the program imports it.

TensorFlow's own ``TF_USE_LEGACY_KERAS=1`` switches ``tf.keras`` only; ``import keras`` stays Keras 3.
Under this switch ``keras`` and every ``keras.<sub>`` are the very ``tf_keras`` module objects (not
copies), so classes compare equal whichever name a script or library imported them by.
"""

from __future__ import annotations

# Nothing else at the top: the image imports this module in every interpreter (typing, collections.abc or
# importlib.abc would cost each a few milliseconds, importlib.abc some 20); the switch imports what it
# needs once it is on.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping, Sequence
    from importlib.abc import Loader as _Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any
else:
    _Loader = object  # the import system asks a loader for no more than the methods defined here

# Set by the entry for every program when the hyperparameter sagetrain_legacy_keras is true; users may
# set it themselves (an estimator's environment, `docker run -e`).
LEGACY_KERAS_VAR = "SAGETRAIN_LEGACY_KERAS"
# TensorFlow's switch for tf.keras (read when tensorflow is imported).
TF_USE_LEGACY_KERAS_VAR = "TF_USE_LEGACY_KERAS"
ALIAS = "keras"
TARGET = "tf_keras"


_ON, _OFF = ("1", "true"), ("", "0", "false")


def requested(environ: Mapping[str, str]) -> bool:
    return environ.get(LEGACY_KERAS_VAR, "").strip().lower() in _ON


def checked_request(environ: Mapping[str, str]) -> bool:
    """``requested``, for the entry: a value that is neither on nor off is the user's error."""
    cause = misread_value(environ)
    if cause is not None:
        from sagetrain.errors import UserError

        raise UserError(cause)
    return requested(environ)


def misread_value(environ: Mapping[str, str]) -> str | None:
    """The sentence for a value of the variable that is neither on nor off, else None. Pure."""
    value = environ.get(LEGACY_KERAS_VAR, "")
    if value.strip().lower() in _ON + _OFF:
        return None
    return f"environment variable {LEGACY_KERAS_VAR} is {value!r}; set it to 1 (tf-keras) or 0 (Keras 3)"


def switch_env() -> dict[str, str]:
    """What a process's environment needs for the switch."""
    return {LEGACY_KERAS_VAR: "1", TF_USE_LEGACY_KERAS_VAR: "1"}


def target_name(name: str) -> str | None:
    """The tf_keras module ``name`` stands for: ``keras`` → ``tf_keras``, ``keras.a.b`` → ``tf_keras.a.b``;
    None for other names. Pure."""
    if name == ALIAS or name.startswith(ALIAS + "."):
        return TARGET + name[len(ALIAS) :]
    return None


class KerasIsTfKeras(_Loader):
    """Answers imports of ``keras`` and ``keras.*`` with the tf_keras modules themselves: a meta path
    finder and its modules' loader. What it uses of importlib is imported when it is made, before it is
    on the meta path (an import from inside would ask it again)."""

    def __init__(self) -> None:
        import importlib
        import importlib.machinery

        self._import = importlib.import_module
        self._spec = importlib.machinery.ModuleSpec

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        real = target_name(fullname)
        if real is None:
            return None
        return self._spec(fullname, self, loader_state=real)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = self._import(str(spec.loader_state))
        # The import system sets __spec__ on what this returns; tf_keras' modules keep their own.
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        alias_spec = module.__spec__
        if alias_spec is not None and isinstance(alias_spec.loader_state, self._spec):
            module.__spec__ = alias_spec.loader_state


def install(environ: MutableMapping[str, str], meta_path: list[Any]) -> None:
    """Switch this interpreter: TensorFlow's variable for tf.keras, the finder for ``import keras``."""
    environ.update(switch_env())
    if not any(isinstance(finder, KerasIsTfKeras) for finder in meta_path):
        meta_path.insert(0, KerasIsTfKeras())


def install_if_requested(environ: MutableMapping[str, str], meta_path: list[Any]) -> None:
    """What the image's .pth line calls at every interpreter start."""
    if requested(environ):
        install(environ, meta_path)
