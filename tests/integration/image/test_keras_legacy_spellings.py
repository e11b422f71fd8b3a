"""Keras 2 spellings that public scripts use, accepted by the image's Keras 3 without changing what
Keras 3 does (container/keras/patches 0004 to 0008): each test fails on Keras 3 without its patch."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.timeout(300)


def small_model(seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )


def ids(variables) -> list[int]:
    return [id(variable) for variable in variables]


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(lambda optimizer: optimizer, id="adam"),
        pytest.param(lambda optimizer: keras.optimizers.LossScaleOptimizer(optimizer), id="loss-scale"),
    ],
)
def test_optimizer_variables_is_a_list_and_a_call_returning_the_same_list(wrap):
    model = small_model()
    optimizer = wrap(keras.optimizers.Adam(0.01))
    optimizer.build(model.trainable_variables)
    as_list = optimizer.variables
    assert isinstance(as_list, list)
    # iterations, learning rate, and two Adam slots per trainable variable at least
    assert len(as_list) >= 2 + 2 * len(model.trainable_variables)
    assert ids(optimizer.variables()) == ids(as_list)
    assert ids(optimizer.variables()()) == ids(as_list)


def test_compile_accepts_experimental_run_tf_function_with_one_warning_and_trains_the_same():
    x = np.random.RandomState(0).uniform(-1, 1, size=(32, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    plain = small_model(seed=4)
    plain.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    plain.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)

    legacy = small_model(seed=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):  # one calling line, compiled twice: warned once
            legacy.compile(
                optimizer=keras.optimizers.SGD(0.1), loss="mse", experimental_run_tf_function=False
            )
    warned = [w for w in caught if "experimental_run_tf_function" in str(w.message)]
    assert len(warned) == 1, [str(w.message) for w in caught]
    legacy.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(legacy.get_weights(), plain.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)


def test_compile_still_rejects_unknown_arguments():
    with pytest.raises(TypeError, match="not_an_argument"):
        small_model().compile(optimizer="sgd", loss="mse", not_an_argument=True)


def fitted_model() -> tuple[keras.Model, np.ndarray]:
    x = np.random.RandomState(0).uniform(-1, 1, size=(32, 3)).astype("float32")
    model = small_model(seed=2)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, x.sum(axis=1, keepdims=True), batch_size=8, epochs=2, verbose=0)
    return model, x


def served(folder, x: np.ndarray) -> np.ndarray:
    import tensorflow as tf

    signature = tf.saved_model.load(str(folder)).signatures["serving_default"]
    (output,) = signature(tf.constant(x)).values()
    return output.numpy()


@pytest.mark.parametrize(
    "save",
    [
        pytest.param(lambda model, path: model.save(path), id="no-extension"),
        pytest.param(lambda model, path: model.save(str(path), save_format="tf"), id="save-format-tf"),
        pytest.param(lambda model, path: keras.models.save_model(model, path), id="save-model"),
    ],
)
def test_save_to_a_folder_writes_a_saved_model_that_serves_the_same_predictions(tmp_path, save):
    """Patch 0006: Keras 2's SavedModel idiom (Keras 3 raises ValueError for each of these)."""
    from keras.src.utils import keras_2_spellings

    keras_2_spellings.warn_once.cache_clear()  # each case its own process's first warning
    model, x = fitted_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save(model, tmp_path / "1")
    assert (tmp_path / "1" / "saved_model.pb").is_file()
    np.testing.assert_allclose(served(tmp_path / "1", x), model.predict(x, verbose=0), rtol=1e-6)
    said = [str(w.message) for w in caught if "SavedModel" in str(w.message)]
    assert len(said) == 1 and "model.export(path)" in said[0], said


def test_the_saved_model_warning_is_given_once_per_process(tmp_path):
    from keras.src.utils import keras_2_spellings

    keras_2_spellings.warn_once.cache_clear()
    model, _ = fitted_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for index in range(3):
            model.save(tmp_path / str(index))
    said = [w for w in caught if "writes a TensorFlow SavedModel" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert said[0].filename == __file__  # shown at the line that called model.save


def test_saves_keras_3_accepts_are_unchanged(tmp_path):
    model, x = fitted_model()
    model.save(tmp_path / "model.keras")
    model.save(tmp_path / "model.h5")
    model.save(tmp_path / "unzipped", zipped=False)  # an unzipped .keras folder, not a SavedModel
    assert not (tmp_path / "unzipped" / "saved_model.pb").exists()
    assert (tmp_path / "unzipped" / "config.json").is_file()
    for path in ("model.keras", "model.h5"):
        reloaded = keras.models.load_model(tmp_path / path, compile=False)
        np.testing.assert_allclose(reloaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)
    with pytest.raises(ValueError, match="Invalid filepath extension"):
        model.save(tmp_path / "zipped", zipped=True)
    with pytest.raises(ValueError, match="not supported"):
        model.save(tmp_path / "with-options", options=None)


def test_metric_reset_states_is_reset_state():
    """Patch 0007: Keras 2's `reset_states()` (TensorFlow's custom training loop tutorials)."""
    mean = keras.metrics.Mean()
    mean.update_state([1.0, 3.0])
    assert float(mean.result()) == 2.0
    mean.reset_states()
    assert float(mean.result()) == 0.0
    accuracy = keras.metrics.SparseCategoricalAccuracy()
    accuracy.update_state([1], [[0.1, 0.9]])
    accuracy.reset_states()
    assert float(accuracy.result()) == 0.0


@pytest.mark.parametrize(
    "optimizer",
    [keras.optimizers.SGD, keras.optimizers.Adam, keras.optimizers.RMSprop, keras.optimizers.Adadelta],
)
def test_lr_sets_the_learning_rate_and_trains_as_learning_rate_does(optimizer):
    """Patch 0008: Keras 2's `lr=` (Keras 3 raises; tf-keras 2.21 accepts it and ignores it)."""
    x = np.random.RandomState(0).uniform(-1, 1, size=(32, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    trained = []
    for arguments in ({"lr": 0.0123}, {"learning_rate": 0.0123}):
        model = small_model(seed=3)
        model.compile(optimizer=optimizer(**arguments), loss="mse")
        assert float(model.optimizer.learning_rate) == pytest.approx(0.0123)
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        trained.append(model.get_weights())
    for got, want in zip(*trained, strict=True):
        np.testing.assert_array_equal(got, want)


def test_other_unknown_optimizer_arguments_are_still_refused():
    with pytest.raises(ValueError, match="not recognized"):
        keras.optimizers.Adam(beta_3=0.5)


def test_lr_wins_over_learning_rate_as_in_keras_2_with_one_warning_at_the_callers_line():
    from keras.src.utils import keras_2_spellings

    keras_2_spellings.warn_once.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizer = keras.optimizers.Adam(learning_rate=0.5, lr=0.0123)
        keras.optimizers.SGD(lr=0.1)
    assert float(optimizer.learning_rate) == pytest.approx(0.0123)
    said = [w for w in caught if "`lr`" in str(w.message)]
    assert [(w.filename, w.category) for w in said] == [(__file__, UserWarning)], said
