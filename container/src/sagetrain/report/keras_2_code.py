"""The errors Keras 3 raises on code written for Keras 2 that the legacy-Keras switch runs: one entry per
Keras 2 spelling, each with the error line Keras 3.15.1 prints for it. A failed rank that printed one of
them gets the switch named in the job's failure sentence; nothing else does.

Left out on purpose: Keras 2 spellings the image's Keras accepts (container/keras/patches), and errors
tf-keras 2.21 raises as well (TensorFlow 1 sessions, ``keras.utils.np_utils``, ``keras.layers.core``,
``keras.wrappers``, ``mixed_precision.experimental``, ``predict_classes``), where the switch would not help.
The README's table of public scripts lists the same spellings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from sagetrain.config.hyperparameters import LaunchSettings
from sagetrain.legacy_keras import LEGACY_KERAS_VAR

# How Keras 3 names its modules in errors: `keras.x`, `keras.api.x`, `keras._tf_keras.keras.x` (tf.keras).
# Under the switch they are tf_keras', so its errors never match.
_KERAS = r"keras(?:\.api|\._tf_keras\.keras)?"
_OPTIMIZERS = (
    "Adadelta|Adafactor|Adagrad|Adam|AdamW|Adamax|Ftrl|Lamb|Lion|LossScaleOptimizer|Muon|Nadam|RMSprop|SGD"
)


@dataclass(frozen=True)
class Keras2Error:
    """One Keras 2 spelling Keras 3 refuses and tf-keras runs."""

    spelling: str  # the Keras 2 code, as the README's table names it
    pattern: str  # a regular expression for the error line Keras 3 prints
    example: str  # that line as Keras 3.15.1 prints it (the unit tests check the pattern against it)


KERAS_2_ERRORS: tuple[Keras2Error, ...] = (
    Keras2Error(
        "model.fit_generator / evaluate_generator / predict_generator",
        r"object has no attribute '(?:fit|evaluate|predict)_generator'",
        "AttributeError: 'Sequential' object has no attribute 'fit_generator'",
    ),
    Keras2Error(
        "fit / evaluate / predict with workers=, use_multiprocessing=, max_queue_size=",
        # fit and predict name the argument in a TypeError; evaluate takes **kwargs and refuses them.
        r"\.(?:fit|evaluate|predict)\(\) got an unexpected keyword argument "
        r"'(?:workers|use_multiprocessing|max_queue_size)'"
        r"|Arguments not recognized: \{'(?:workers|use_multiprocessing|max_queue_size)'",
        "TypeError: TensorFlowTrainer.fit() got an unexpected keyword argument 'workers'",
    ),
    Keras2Error(
        "keras.optimizers.legacy",
        r"`keras\.optimizers\.legacy` is not supported in Keras 3",
        "ImportError: `keras.optimizers.legacy` is not supported in Keras 3. When using `tf.keras`, to "
        "continue using a `tf.keras.optimizers.legacy` optimizer, you can install the `tf_keras` package",
    ),
    Keras2Error(
        "keras.preprocessing.image.ImageDataGenerator, keras.preprocessing.text",
        rf"(?:cannot import name '\w+' from|No module named|module) '{_KERAS}\.preprocessing\b",
        "ImportError: cannot import name 'ImageDataGenerator' from 'keras.preprocessing.image' "
        "(/opt/venv/lib/python3.11/site-packages/keras/preprocessing/image/__init__.py)",
    ),
    Keras2Error(
        "keras.layers.experimental, keras.callbacks.experimental, keras.utils.experimental (DatasetCreator)",
        rf"module '{_KERAS}\.(?:layers|callbacks|utils)' has no attribute 'experimental'"
        rf"|No module named '{_KERAS}\.(?:layers|callbacks|utils)\.experimental\b",
        "AttributeError: module 'keras._tf_keras.keras.layers' has no attribute 'experimental'",
    ),
    Keras2Error(
        "keras.backend.get_value / set_value / set_learning_phase and other backend functions",
        rf"module '{_KERAS}\.backend' has no attribute '(?:get_value|set_value|batch_get_value|"
        r"batch_set_value|set_learning_phase|learning_phase|eval|placeholder|variable)'",
        "AttributeError: module 'keras.backend' has no attribute 'set_value'",
    ),
    Keras2Error(
        "optimizer.lr (read, or given to K.set_value)",
        rf"'(?:{_OPTIMIZERS})' object has no attribute 'lr'",
        "AttributeError: 'Adam' object has no attribute 'lr'",
    ),
    Keras2Error(
        "tf.keras.backend.set_value(optimizer.learning_rate, …) on a Keras 3 variable",
        # Keras 3's legacy backend reads a dtype's .name, and a Keras 3 variable's dtype is a string.
        r"(?s:keras/src/legacy/backend\.py.{0,500}?'str' object has no attribute 'name')",
        'File "/opt/venv/lib/python3.11/site-packages/keras/src/legacy/backend.py", line 1877, in set_value\n'
        "AttributeError: 'str' object has no attribute 'name'",
    ),
    Keras2Error(
        "LossScaleOptimizer.get_scaled_loss / get_unscaled_gradients",
        r"'LossScaleOptimizer' object has no attribute '(?:get_scaled_loss|get_unscaled_gradients)'",
        "AttributeError: 'LossScaleOptimizer' object has no attribute 'get_scaled_loss'",
    ),
    Keras2Error(
        "model.save_weights(prefix) as a TensorFlow checkpoint",
        r"The filename must end in `\.weights\.h5`",
        "ValueError: The filename must end in `.weights.h5`. Received: filepath=/opt/ml/checkpoints/ckpt",
    ),
    Keras2Error(
        "model.load_weights of a TensorFlow checkpoint, keras.models.load_model of a SavedModel folder",
        r"File format not supported: filepath=.*Keras 3 only supports",
        "ValueError: File format not supported: filepath=/opt/ml/model/1. Keras 3 only supports V3 `.keras` "
        "files, legacy H5 format files (`.h5` extension).",
    ),
    Keras2Error(
        "ModelCheckpoint to a path without .keras (or .weights.h5 with save_weights_only=True)",
        r"[Tt]he filepath provided must end in `\.(?:keras|weights\.h5)`",
        "ValueError: The filepath provided must end in `.keras` (Keras model format). Received: "
        "filepath=/opt/ml/checkpoints/ckpt",
    ),
    Keras2Error(
        "model.save(..., save_format='h5' or 'keras') to a path without that extension",
        r"The `save_format` argument is deprecated in Keras 3",
        "ValueError: The `save_format` argument is deprecated in Keras 3. Please remove this argument and "
        "pass a file path with either `.keras` or `.h5` extension.Received: save_format=h5",
    ),
    Keras2Error(
        "model.save(..., options= / signatures= / save_traces=)",
        r"argument\(s\) are not supported: \[[^]]*'(?:options|signatures|save_traces)'",
        "ValueError: The following argument(s) are not supported: ['options']",
    ),
    Keras2Error(
        "model.save_spec()",
        r"object has no attribute 'save_spec'",
        "AttributeError: 'Sequential' object has no attribute 'save_spec'",
    ),
    Keras2Error(
        "Layer.add_metric",
        r"Layer `add_metric\(\)` method is deprecated",
        "NotImplementedError: Exception encountered when calling Endpoint.call().\n\nLayer `add_metric()` "
        "method is deprecated. Add your metric in `Model.compile(metrics=[...])`",
    ),
    Keras2Error(
        "fit under ParameterServerStrategy with a dataset (tf-keras's fit takes it; Keras 3's does not)",
        r"(?s:/keras/src/.{0,2000}?To use this dataset, you need to pass this dataset to "
        r"ClusterCoordinator\.create_per_worker_dataset)",
        'File "/opt/venv/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 113, in '
        "error_handler\nValueError: To use this dataset, you need to pass this dataset to "
        "ClusterCoordinator.create_per_worker_dataset.",
    ),
)

_ANY_KERAS_2_ERROR = re.compile("|".join(f"(?:{error.pattern})" for error in KERAS_2_ERRORS))

LEGACY_KERAS_HINT = (
    "if the program was written for Keras 2, run it with tf-keras as both keras and tf.keras: set the "
    f"hyperparameter {LaunchSettings.key('legacy_keras')}=true (or the environment variable "
    f"{LEGACY_KERAS_VAR}=1)"
)


def shows_keras_2_code(texts: Iterable[str]) -> bool:
    """Whether ``texts`` (a rank's message, traceback, last lines) hold an error Keras 3 raises on Keras 2
    code that the switch runs; an error may span lines (a traceback's frame, then its exception). Pure."""
    return _ANY_KERAS_2_ERROR.search("\n".join(texts)) is not None
