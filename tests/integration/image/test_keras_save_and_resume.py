"""A model the image's Keras 3 saves, it loads and trains on (container/keras/patches 0009 and 0010).

0009: TensorFlow functions given as activations round-trip: a model saved to `.keras` or `.h5`, by
`model.save` or by ModelCheckpoint, loads back and predicts what it predicted, and files saved before the
patch (TensorFlow's names, `softmax_v2`) load too. Without it `tf.nn.softmax`, `tf.nn.log_softmax`,
`tf.nn.silu`/`tf.nn.swish` and `tf.math.exp` fail to load ("Could not locate function 'softmax_v2'"); the
others pin the names they were already saved by, whose Keras function must compute exactly what
TensorFlow's does.
0010: a compiled model loaded from `.h5` trains on with its optimizer state (without it the first `fit`
fails, "Unknown variable"), as one loaded from `.keras` does: resumed training ends with the weights of
training never interrupted, bit for bit.
0011: saving to `.h5` leaves the model's compile configuration alone (without it a `.keras` file saved
afterwards loads with RMSprop in place of the model's optimizer)."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.timeout(300)

# The TensorFlow function a script gives, and the Keras activation a loaded model has in its place.
ACTIVATIONS: dict[str, tuple[Callable, str]] = {
    "tf.nn.softmax": (tf.nn.softmax, "softmax"),
    "tf.nn.relu": (tf.nn.relu, "relu"),
    "tf.nn.gelu": (tf.nn.gelu, "gelu"),  # both exact (approximate=False) by default
    "tf.nn.silu": (tf.nn.silu, "silu"),
    "tf.nn.swish": (tf.nn.swish, "silu"),
    "tf.math.sigmoid": (tf.math.sigmoid, "sigmoid"),
    "tf.nn.sigmoid": (tf.nn.sigmoid, "sigmoid"),
    "tf.math.tanh": (tf.math.tanh, "tanh"),
    "tf.nn.tanh": (tf.nn.tanh, "tanh"),
    "tf.nn.elu": (tf.nn.elu, "elu"),
    "tf.nn.selu": (tf.nn.selu, "selu"),
    "tf.nn.softplus": (tf.nn.softplus, "softplus"),
    "tf.nn.softsign": (tf.nn.softsign, "softsign"),
    "tf.nn.relu6": (tf.nn.relu6, "relu6"),
    "tf.nn.leaky_relu": (tf.nn.leaky_relu, "leaky_relu"),  # slope 0.2 in both
    "tf.nn.log_softmax": (tf.nn.log_softmax, "log_softmax"),
    "tf.math.exp": (tf.math.exp, "exponential"),
}
# What Keras 3.15.1 saved for these before the patch, and cannot load.
SAVED_BY_TENSORFLOW_NAME = ["tf.nn.softmax", "tf.nn.log_softmax", "tf.nn.silu", "tf.nn.swish", "tf.math.exp"]
FORMATS = ["keras", "h5"]


def probe_inputs() -> np.ndarray:
    """Inputs whose pre-activations reach both signs, saturation and near-zero values (where leaky_relu's
    slope, gelu's approximation and relu6's cap show)."""
    rows = np.random.RandomState(0).uniform(-4, 4, size=(64, 4)).astype("float32")
    return np.concatenate([rows, np.zeros((1, 4), "float32"), np.full((1, 4), 8.0, "float32")])


def model_with(activation: Callable, seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    hidden = keras.layers.Dense(8, activation="tanh")
    return keras.Sequential([keras.Input((4,)), hidden, keras.layers.Dense(3, activation=activation)])


def test_every_listed_keras_activation_computes_exactly_what_its_tensorflow_function_computes():
    """The premise of saving each TensorFlow function under a Keras name: on a grid from -100 to 100 (and
    in a traced function, as `fit` and `predict` run), the same float32 values, bit for bit."""
    grid = np.concatenate([np.linspace(-100, 100, 4004), np.linspace(-1e-3, 1e-3, 196)]).astype("float32")
    batch = tf.constant(grid.reshape(-1, 7))  # softmax and log_softmax along the last axis
    for label, (function, keras_name) in ACTIVATIONS.items():
        equivalent = getattr(keras.activations, keras_name)
        np.testing.assert_array_equal(equivalent(batch).numpy(), function(batch).numpy(), err_msg=label)
        # Traced against traced: a graph may compute an op differently from eager execution (tf.nn.gelu's
        # own traced and eager results differ in a value near 1e-37).
        traced, traced_function = (tf.function(f, autograph=False) for f in (equivalent, function))
        np.testing.assert_array_equal(traced(batch).numpy(), traced_function(batch).numpy(), err_msg=label)


@pytest.mark.parametrize("file_format", FORMATS)
@pytest.mark.parametrize("label", list(ACTIVATIONS))
def test_a_model_saved_with_a_tensorflow_activation_loads_and_predicts_the_same(tmp_path, label, file_format):
    function, keras_name = ACTIVATIONS[label]
    model = model_with(function)
    x = probe_inputs()
    path = tmp_path / f"model.{file_format}"
    model.save(path)
    assert model.layers[-1].activation is function  # the script's model keeps the function it was given
    loaded = keras.models.load_model(path)
    assert loaded.layers[-1].activation is getattr(keras.activations, keras_name)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_an_activation_layer_and_a_recurrent_activation_round_trip(tmp_path):
    keras.utils.set_random_seed(1)
    inputs = keras.Input((5, 4))
    hidden = keras.layers.LSTM(6, activation=tf.nn.softsign, recurrent_activation=tf.nn.sigmoid)(inputs)
    outputs = keras.layers.Activation(tf.nn.softmax)(keras.layers.Dense(3)(hidden))
    model = keras.Model(inputs, outputs)
    x = np.random.RandomState(2).uniform(-2, 2, size=(16, 5, 4)).astype("float32")
    for file_format in FORMATS:
        model.save(tmp_path / f"model.{file_format}")
        loaded = keras.models.load_model(tmp_path / f"model.{file_format}")
        np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def model_with_every_activation() -> keras.Model:
    """One branch per listed activation, concatenated: one fit covers them all."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    branches = [
        keras.layers.Dense(3, activation=function, name=label.replace(".", "_"))(hidden)
        for label, (function, _) in ACTIVATIONS.items()
    ]
    model = keras.Model(inputs, keras.layers.Concatenate()(branches))
    # Not loss="mse": Keras 3.15.1 cannot load that name back from a .h5 file's training config.
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mean_squared_error")
    return model


def test_model_checkpoint_files_load_and_train_on_as_if_never_interrupted(tmp_path):
    model = model_with_every_activation()
    x = probe_inputs()
    y = np.random.RandomState(4).uniform(0, 1, size=(len(x), 3 * len(ACTIVATIONS))).astype("float32")
    checkpoints = [
        keras.callbacks.ModelCheckpoint(str(tmp_path / f"checkpoint-{{epoch}}.{file_format}"))
        for file_format in FORMATS
    ]
    train = dict(batch_size=16, shuffle=False, verbose=0)
    model.fit(x, y, epochs=2, callbacks=checkpoints, **train)
    at_epoch_2 = model.get_weights()
    predicted_at_epoch_2 = model.predict(x, verbose=0)
    steps_at_epoch_2 = int(model.optimizer.iterations)
    model.fit(x, y, epochs=3, initial_epoch=2, **train)  # never interrupted
    for file_format in FORMATS:
        resumed = keras.models.load_model(tmp_path / f"checkpoint-2.{file_format}")
        for got, want in zip(resumed.get_weights(), at_epoch_2, strict=True):
            np.testing.assert_array_equal(got, want, err_msg=file_format)
        np.testing.assert_array_equal(resumed.predict(x, verbose=0), predicted_at_epoch_2)
        assert int(resumed.optimizer.iterations) == steps_at_epoch_2, file_format
        resumed.fit(x, y, epochs=3, initial_epoch=2, **train)
        for got, want in zip(resumed.get_weights(), model.get_weights(), strict=True):
            np.testing.assert_array_equal(got, want, err_msg=file_format)


@pytest.mark.parametrize("file_format", FORMATS)
def test_a_loaded_model_trains_on_with_its_optimizer_state(tmp_path, file_format):
    """Patch 0010 alone (a Keras activation, a classifier's loss): Adam's moments come back with the
    model, so one more epoch after loading equals one more epoch of the model that was saved."""
    keras.utils.set_random_seed(5)
    hidden = keras.layers.Dense(8, activation="relu")
    model = keras.Sequential([keras.Input((4,)), hidden, keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    x = probe_inputs()
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0).astype("int64")
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    model.save(tmp_path / f"model.{file_format}")
    loaded = keras.models.load_model(tmp_path / f"model.{file_format}")
    for got, want in zip(loaded.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=got.path)
    for trained in (model, loaded):
        trained.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    for got, want in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_keras_file_saved_after_an_h5_file_keeps_the_optimizer(tmp_path):
    """Patch 0011 alone."""
    model = model_with(tf.nn.relu)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mean_squared_error")
    x = probe_inputs()
    model.fit(x, x[:, :3], batch_size=16, epochs=1, verbose=0)
    before = model.get_compile_config()
    model.save(tmp_path / "model.h5")
    assert model.get_compile_config() == before
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    assert isinstance(loaded.optimizer, keras.optimizers.Adam), loaded.optimizer
    for got, want in zip(loaded.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=got.path)


def keras_3_config_before_the_patch(function: Callable) -> object:
    """The activation config Keras 3.15.1's `activations.serialize` wrote for a TensorFlow function it has
    no Keras name for: its `serialize_keras_object` config, `{"module": "builtins", "class_name":
    "function", "config": "softmax_v2", "registered_name": "function"}`."""
    return keras.saving.serialize_keras_object(function)


def with_activation_config(model_config: dict, layer_name: str, saved: object) -> dict:
    for layer in model_config["config"]["layers"]:
        if layer["config"]["name"] == layer_name:
            layer["config"]["activation"] = saved
            return model_config
    raise AssertionError(f"no layer {layer_name} in the saved model's config")


def rewrite_saved_activation(path: Path, layer_name: str, saved: object) -> None:
    """Put `saved` as the layer's activation in a saved `.keras` (its config.json) or `.h5` file (its
    model_config attribute), as a file written before the patch holds it."""
    if path.suffix == ".h5":
        with h5py.File(path, "r+") as file:
            config = json.loads(file.attrs["model_config"])
            file.attrs["model_config"] = json.dumps(with_activation_config(config, layer_name, saved))
        return
    rewritten = path.with_name("rewritten.keras")
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(rewritten, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "config.json":
                data = json.dumps(with_activation_config(json.loads(data), layer_name, saved)).encode()
            target.writestr(item, data)
    rewritten.replace(path)


@pytest.mark.parametrize(
    "file_format, form",
    [("keras", "keras-3-config"), ("h5", "keras-3-config"), ("h5", "keras-2-name")],
)
@pytest.mark.parametrize("label", SAVED_BY_TENSORFLOW_NAME)
def test_a_file_saved_before_the_patch_loads_and_predicts_the_same(tmp_path, label, file_format, form):
    function, keras_name = ACTIVATIONS[label]
    saved = keras_3_config_before_the_patch(function) if form == "keras-3-config" else function.__name__
    assert saved != keras_name, saved  # TensorFlow's name, which Keras 3.15.1 cannot locate
    model = model_with(function)
    path = tmp_path / f"model.{file_format}"
    model.save(path)
    rewrite_saved_activation(path, model.layers[-1].name, saved)
    loaded = keras.models.load_model(path)
    assert loaded.layers[-1].activation is getattr(keras.activations, keras_name)
    x = probe_inputs()
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.parametrize("file_format", FORMATS)
def test_a_custom_object_of_a_tensorflow_name_still_wins(tmp_path, file_format):
    def exp(x):  # the user's own function, saved by the same name tf.math.exp was
        return tf.math.exp(x) + 1.0

    model = model_with(tf.math.exp)
    path = tmp_path / f"model.{file_format}"
    model.save(path)
    rewrite_saved_activation(path, model.layers[-1].name, keras_3_config_before_the_patch(tf.math.exp))
    assert keras.models.load_model(path, custom_objects={"exp": exp}).layers[-1].activation is exp
