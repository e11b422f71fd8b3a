"""A Horovod + Keras 3 script written the way Horovod's own tensorflow2_keras_mnist example is.

Nothing in it knows about this image: hvd.init, one GPU per local rank, the dataset sharded by rank and
repeated with a fixed number of steps per epoch, DistributedOptimizer with the learning rate scaled by
the number of ranks, the broadcast, metric-average and warmup callbacks, and TensorBoard logs and a save
on rank 0. Run it with sagemaker_mpi_enabled (or on several hosts, where the image picks Horovod by
default). Each rank
prints a digest of its final weights: with gradients really averaged, every rank prints the same one.
"""

import argparse
import hashlib
import os
from pathlib import Path

import horovod.tensorflow.keras as hvd
import keras
import numpy as np
import tensorflow as tf


def read_digits(files: list[str]) -> tf.data.Dataset:
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        record = tf.io.parse_single_example(serialized, spec)
        image = tf.cast(tf.io.decode_raw(record["image"], tf.uint8), tf.float32) / 16.0
        return tf.reshape(image, (8, 8, 1)), record["label"]

    return tf.data.TFRecordDataset(files).map(parse)


def tensorboard_dir() -> str:
    """SageMaker's TensorBoard output folder (what it uploads to the estimator's TensorBoard output
    config); locally just a folder under /opt/ml/output."""
    return str(Path(os.environ.get("SM_OUTPUT_DIR", "/opt/ml/output")) / "tensorboard")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=0.002)
    parser.add_argument("--model_dir", default=None)
    args = parser.parse_args()

    hvd.init()
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    keras.utils.set_random_seed(1 + hvd.rank())  # different initial weights per rank: the broadcast fixes it

    files = sorted(str(p) for p in Path(os.environ["SM_CHANNEL_TRAIN"]).glob("*.tfrecord"))
    records = sum(1 for _ in tf.data.TFRecordDataset(files))
    # As Horovod's example: an endless stream and a fixed number of steps, the same on every rank (a
    # rank that ran out of batches first would leave the others waiting in an allreduce).
    steps_per_epoch = records // hvd.size() // args.batch_size
    dataset = (
        read_digits(files)
        .shard(hvd.size(), hvd.rank())
        .repeat()
        .shuffle(1024, seed=hvd.rank())
        .batch(args.batch_size, drop_remainder=True)
    )
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    scaled_lr = args.learning_rate * hvd.size()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr))
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=1, verbose=0),
    ]
    if hvd.rank() == 0:  # one writer, as for checkpoints: the other ranks' values are the same
        callbacks.append(keras.callbacks.TensorBoard(log_dir=tensorboard_dir(), histogram_freq=1))
    model.fit(
        dataset,
        steps_per_epoch=steps_per_epoch,
        epochs=args.epochs,
        callbacks=callbacks,
        verbose=2 if hvd.rank() == 0 else 0,
    )

    digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()
    print(f"rank={hvd.rank()} host={os.environ.get('SM_CURRENT_HOST')} weights_sha256={digest}", flush=True)
    if hvd.rank() == 0:
        model_dir = Path(os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
        model.save(model_dir / "model.keras")
        model.export(str(model_dir / "1"))


if __name__ == "__main__":
    main()
