"""An AWS script-mode training script, as written for SageMaker's TensorFlow images.

Hyperparameters arrive as command-line arguments, channels and the model folder as SM_* variables.
Reads the digits TFRecord channels of examples/keras_digits, trains a small Keras 3 model in one
process, and saves it where SageMaker and TF Serving expect it.
"""

import argparse
import json
import os
from pathlib import Path

import keras
import tensorflow as tf


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=0.003)
    # SageMaker's TF estimators pass --model_dir (an S3 path on SageMaker); the local model folder is
    # SM_MODEL_DIR.
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--sm-model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAIN"))
    parser.add_argument("--validation", default=os.environ.get("SM_CHANNEL_VALIDATION"))
    parser.add_argument(
        "--output-data-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data")
    )
    # What SageMaker uploads to the estimator's TensorBoard output config (its default local path).
    parser.add_argument(
        "--tensorboard-dir",
        default=str(Path(os.environ.get("SM_OUTPUT_DIR", "/opt/ml/output")) / "tensorboard"),
    )
    return parser.parse_args()


def read_digits(channel_dir: str) -> tf.data.Dataset:
    files = sorted(str(p) for p in Path(channel_dir).glob("*.tfrecord"))
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        record = tf.io.parse_single_example(serialized, spec)
        image = tf.cast(tf.io.decode_raw(record["image"], tf.uint8), tf.float32) / 16.0
        return tf.reshape(image, (8, 8, 1)), record["label"]

    return tf.data.TFRecordDataset(files).map(parse)


def main() -> None:
    args = parse_args()
    keras.utils.set_random_seed(1)
    train = read_digits(args.train).shuffle(2048, seed=1).batch(args.batch_size)
    validation = read_digits(args.validation).batch(256) if args.validation else None

    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    tensorboard = keras.callbacks.TensorBoard(log_dir=args.tensorboard_dir, histogram_freq=1)
    history = model.fit(
        train, validation_data=validation, epochs=args.epochs, verbose=2, callbacks=[tensorboard]
    )

    model_dir = Path(args.sm_model_dir)
    model.export(str(model_dir / "1"))  # SavedModel with a serving signature, for TF Serving
    model.save(model_dir / "model.keras")
    final = {name: float(values[-1]) for name, values in history.history.items()}
    Path(args.output_data_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.output_data_dir) / "metrics.json").write_text(json.dumps(final))
    print("final " + " ".join(f"{name}={value:.4f}" for name, value in final.items()))


if __name__ == "__main__":
    main()
