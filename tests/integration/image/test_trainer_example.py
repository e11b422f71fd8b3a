"""The digits example end to end on one process: it learns, and its export loads and predicts both as a
SavedModel (serving signature) and as a .keras file."""

import json
import shutil

import numpy as np
from sagetrain.config.hyperparameters import decode_hyperparameters
from sagetrain.config.job_files import write_json
from sagetrain.config.local_paths import local_path_config
from sagetrain.config.paths import Paths
from tensorboard_events import event_tags
from trainer_cases.trainer_harness import REPO, run_trainer

EXAMPLE = REPO / "examples" / "keras_digits"


def test_digits_example_trains_evaluates_and_exports(tmp_path):
    import keras
    import tensorflow as tf

    shutil.copytree(EXAMPLE / "data", tmp_path / "input" / "data")
    (tmp_path / "output" / "tensorboard").mkdir(parents=True)
    hyperparameters = decode_hyperparameters(json.loads((EXAMPLE / "hyperparameters.json").read_text()))
    hyperparameters["epochs"] = 3

    run = run_trainer(tmp_path, EXAMPLE / "model.py", hyperparameters)

    assert run.returncode == 0, run.stderr[-3000:]
    assert [line.split()[0] for line in run.epoch_lines()] == ["epoch=1", "epoch=2", "epoch=3"]
    assert "val_accuracy=" in run.epoch_lines()[-1]
    metrics = json.loads((tmp_path / "output" / "data" / "metrics.json").read_text())
    assert metrics["test_accuracy"] > 0.8, metrics
    scalars = event_tags(tmp_path / "output" / "tensorboard")["."]
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(scalars), scalars
    assert scalars["loss"] == [1, 2, 3]  # one value per epoch, at its number

    images = np.stack([np.full((8, 8, 1), value, np.float32) for value in (0.0, 8.0, 16.0)])
    keras_model = keras.saving.load_model(tmp_path / "model" / "model.keras")
    expected = keras_model.predict(images, verbose=0)
    assert expected.shape == (3, 10)
    np.testing.assert_allclose(expected.sum(axis=1), 1.0, rtol=1e-5)

    loaded = tf.saved_model.load(str(tmp_path / "model" / "1"))
    serving = loaded.signatures["serving_default"]
    outputs = serving(tf.constant(images))
    np.testing.assert_allclose(next(iter(outputs.values())).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_the_epoch_scalars_go_to_the_folder_the_tensorboard_output_config_names(tmp_path):
    shutil.copytree(EXAMPLE / "data", tmp_path / "input" / "data")
    write_json(Paths(tmp_path).tensorboard_config, local_path_config("/opt/ml/output/tensorboard-logs"))
    hyperparameters = decode_hyperparameters(json.loads((EXAMPLE / "hyperparameters.json").read_text()))
    hyperparameters["epochs"] = 1

    run = run_trainer(tmp_path, EXAMPLE / "model.py", hyperparameters)

    assert run.returncode == 0, run.stderr[-3000:]
    assert event_tags(tmp_path / "output" / "tensorboard-logs")["."]["loss"] == [1]
    assert not (tmp_path / "output" / "tensorboard").exists()
