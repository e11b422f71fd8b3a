"""Managed spot training's resume pattern, as SageMaker's TensorFlow spot example writes it: a classifier
with `activation=tf.nn.softmax`, ModelCheckpoint files in /opt/ml/checkpoints (here both `.keras` and
`.h5`), and a job that finds checkpoints there resumes with `load_model` of the newest `.h5` file, from the
epoch after it, up to `--epochs`.

Besides training it writes a report to /opt/ml/output/data (what a test compares across jobs): the model's
weights and predictions on fixed inputs, and its optimizer's class and step count, when training ends
(`trained.npz`, `trained.json`) and, in a resumed job, right after loading each format's newest
checkpoint, before training continues (`resumed-h5.npz`, `resumed-keras.npz`, `resumed.json`).
"""

import argparse
import json
import os
import re
from pathlib import Path

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--checkpoint-path", type=Path, default=Path("/opt/ml/checkpoints"))
parser.add_argument("--model_dir", type=Path, default=Path(os.environ["SM_MODEL_DIR"]))
args, _ = parser.parse_known_args()
reports = Path(os.environ["SM_OUTPUT_DATA_DIR"])
reports.mkdir(parents=True, exist_ok=True)

rows = np.random.RandomState(0).uniform(-1, 1, size=(512, 8)).astype("float32")
labels = np.argmax(rows @ np.random.RandomState(1).normal(size=(8, 4)), axis=1)
probe = np.random.RandomState(2).uniform(-2, 2, size=(32, 8)).astype("float32")


def new_classifier():  # not `build_model`: a module defining that is a model module the trainer drives
    tf.keras.utils.set_random_seed(7)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((8,)),
            tf.keras.layers.Dense(16, activation=tf.nn.relu),
            tf.keras.layers.Dense(4, activation=tf.nn.softmax),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def newest_checkpoint(extension):
    """The checkpoint-<epoch>.<extension> file of the highest epoch, and that epoch."""
    found = {}
    for path in args.checkpoint_path.iterdir():
        if match := re.fullmatch(r"checkpoint-(\d+)\." + re.escape(extension), path.name):
            found[int(match.group(1))] = path
    epoch = max(found)
    return found[epoch], epoch


def report(model, stem):
    weights = {f"weight_{index}": value for index, value in enumerate(model.get_weights())}
    np.savez(reports / f"{stem}.npz", predictions=model.predict(probe, verbose=0), **weights)
    return {"optimizer": type(model.optimizer).__name__, "steps": int(model.optimizer.iterations)}


args.checkpoint_path.mkdir(parents=True, exist_ok=True)
if not any(args.checkpoint_path.iterdir()):
    print("no checkpoint: training from the start", flush=True)
    model, initial_epoch = new_classifier(), 0
else:
    path, initial_epoch = newest_checkpoint("h5")
    print(f"resuming from {path.name} at epoch {initial_epoch + 1}", flush=True)
    model = tf.keras.models.load_model(path)
    same_epoch_keras = tf.keras.models.load_model(newest_checkpoint("keras")[0])
    resumed = {"h5": report(model, "resumed-h5"), "keras": report(same_epoch_keras, "resumed-keras")}
    (reports / "resumed.json").write_text(json.dumps({**resumed, "epoch": initial_epoch}))

checkpoints = [
    tf.keras.callbacks.ModelCheckpoint(str(args.checkpoint_path / f"checkpoint-{{epoch}}.{extension}"))
    for extension in ("keras", "h5")
]
model.fit(rows, labels, batch_size=32, epochs=args.epochs, initial_epoch=initial_epoch, callbacks=checkpoints,
          verbose=2)  # fmt: skip
(reports / "trained.json").write_text(json.dumps({**report(model, "trained"), "epochs": args.epochs}))
args.model_dir.mkdir(parents=True, exist_ok=True)
model.save(args.model_dir / "model.keras")
