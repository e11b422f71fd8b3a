"""horovod.tensorflow with Keras model variables: DistributedGradientTape and broadcast_variables.

Usage: tape_worker.py OUT_DIR. Every rank writes OUT_DIR/rank<r>.npz and rank<r>.json. Rank data
differ, so averaged gradients differ from every rank's local ones; the test compares them.
"""

from __future__ import annotations

import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf
from rank_io import RankWriter, to_numpy

keras = tf.keras
SAME_INIT_SEED = 7


def rank_dense_data(rank: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + rank)
    features = rng.normal(size=(16, 4)).astype(np.float32) + rank
    return features, (features.sum(axis=1, keepdims=True) * (rank + 1)).astype(np.float32)


def rank_token_data(rank: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2000 + rank)
    # Each rank looks up a different subset of rows, so the sparse gradients differ by rank.
    tokens = rng.integers(low=rank * 3, high=rank * 3 + 4, size=(8, 2)).astype(np.int32)
    return tokens, rng.normal(size=(8, 1)).astype(np.float32)


def dense_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)]
    )


def embedding_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((2,), dtype="int32"),
            keras.layers.Embedding(12, 3),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )


def mse(model: keras.Model, features, labels) -> tf.Tensor:
    return tf.reduce_mean(tf.square(model(features) - labels))


def gradients(model: keras.Model, features, labels, in_function: bool, **tape_options) -> list:
    def compute():
        with tf.GradientTape() as tape:
            loss = mse(model, features, labels)
        if tape_options.get("distributed", True):
            options = {key: value for key, value in tape_options.items() if key != "distributed"}
            tape = hvd.DistributedGradientTape(tape, **options)
        return tape.gradient(loss, model.trainable_variables)

    return tf.function(compute)() if in_function else compute()


def record_gradient_variants(writer: RankWriter, rank: int) -> None:
    features, labels = rank_dense_data(rank)
    model = dense_model(SAME_INIT_SEED)
    writer.arrays("dense/local", gradients(model, features, labels, False, distributed=False))
    variants = {
        "average": {"op": hvd.Average},
        "sum": {"op": hvd.Sum},
        "fp16": {"compression": hvd.Compression.fp16},
    }
    for mode, in_function in (("eager", False), ("function", True)):
        for name, options in variants.items():
            writer.arrays(f"dense/{mode}/{name}", gradients(model, features, labels, in_function, **options))

    tokens, targets = rank_token_data(rank)
    model = embedding_model(SAME_INIT_SEED)
    local = gradients(model, tokens, targets, False, distributed=False)
    writer.record["embedding_local_gradient_is_sparse"] = isinstance(local[0], tf.IndexedSlices)
    writer.arrays("embedding/local", local)
    for mode, in_function in (("eager", False), ("function", True)):
        dense = gradients(model, tokens, targets, in_function, sparse_as_dense=True)
        writer.record[f"embedding_{mode}_sparse_as_dense_is_dense"] = not isinstance(
            dense[0], tf.IndexedSlices
        )
        writer.arrays(f"embedding/{mode}/sparse_as_dense", dense)
        writer.arrays(f"embedding/{mode}/sparse", gradients(model, tokens, targets, in_function))


def record_eager_broadcast(writer: RankWriter, rank: int) -> None:
    """Rank-specific initial weights and one local Adam step, then broadcast from rank 0."""
    features, labels = rank_dense_data(rank)
    model = dense_model(100 + rank)
    optimizer = keras.optimizers.Adam(0.01)
    grads = gradients(model, features, labels, False, distributed=False)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    optimizer_variables = list(optimizer.variables)
    writer.arrays("bcast/before/model", model.variables)
    writer.arrays("bcast/before/optimizer", optimizer_variables)
    hvd.broadcast_variables(model.variables + optimizer_variables, root_rank=0)
    writer.arrays("bcast/after/model", model.variables)
    writer.arrays("bcast/after/optimizer", optimizer_variables)


def record_training_loop(writer: RankWriter, rank: int) -> None:
    """Horovod's TF2 custom-loop pattern: distributed tape, broadcast after the first step, in tf.function."""
    features, labels = rank_dense_data(rank)
    model = dense_model(200 + rank)
    optimizer = keras.optimizers.Adam(0.01)
    writer.arrays("loop/initial", model.variables)

    @tf.function
    def training_step(batch_features, batch_labels, first_batch: bool):
        with tf.GradientTape() as tape:
            loss = mse(model, batch_features, batch_labels)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        if first_batch:
            hvd.broadcast_variables(model.variables + list(optimizer.variables), root_rank=0)
        return loss

    for step in range(4):
        batch = slice(step * 4, step * 4 + 4)
        training_step(features[batch], labels[batch], step == 0)
    writer.arrays("loop/final/model", model.variables)
    writer.arrays("loop/final/optimizer", list(optimizer.variables))
    writer.record["loop_optimizer_iterations"] = int(to_numpy(optimizer.iterations))


def main() -> None:
    hvd.init()
    writer = RankWriter(sys.argv[1], hvd.rank(), hvd.size())
    record_gradient_variants(writer, hvd.rank())
    record_eager_broadcast(writer, hvd.rank())
    record_training_loop(writer, hvd.rank())
    writer.close()


if __name__ == "__main__":
    main()
