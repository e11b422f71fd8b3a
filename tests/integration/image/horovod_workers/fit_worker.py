"""hvd.DistributedOptimizer + compile + fit and the Horovod Keras callbacks, on rank-specific data.

Usage: fit_worker.py OUT_DIR. Runs every scenario through horovod.tensorflow.keras and through
horovod.keras; every rank writes OUT_DIR/rank<r>.npz and rank<r>.json, keyed by module name. Each
rank also trains plain (Horovod-free) reference models in-process: one on the concatenation of all
ranks' batches (what averaging must reproduce) and one on its own data only (what an un-averaged
run gives).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import tensorflow as tf
from rank_io import RankWriter, ScopedWriter, to_numpy

keras = tf.keras
STEPS = 4
BATCH = 8
SAME_INIT_SEED = 11


def rank_data(rank: int, rows: int = STEPS * BATCH) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3000 + rank)
    features = (rng.normal(size=(rows, 4)) + rank).astype(np.float32)
    labels = (np.sin(features).sum(axis=1, keepdims=True) * (rank + 1)).astype(np.float32)
    return features, labels


def global_batches(size: int, batches_per_update: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows in the order a single process must see them so that its batch k holds batch k of every rank."""
    per_rank = [rank_data(rank) for rank in range(size)]
    rows_per_update = BATCH * batches_per_update
    features, labels = [], []
    for update in range(STEPS // batches_per_update):
        rows = slice(update * rows_per_update, (update + 1) * rows_per_update)
        for rank_features, rank_labels in per_rank:
            features.append(rank_features[rows])
            labels.append(rank_labels[rows])
    return np.concatenate(features), np.concatenate(labels)


def model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )


def optimizer_variables(optimizer) -> list:
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def plain_fit(optimizer, features, labels, batch_size: int) -> keras.Model:
    reference = model(SAME_INIT_SEED)
    reference.compile(optimizer=optimizer, loss="mse")
    reference.fit(features, labels, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    return reference


class LogRecorder(keras.callbacks.Callback):
    """Copies the epoch logs as this callback sees them (its place in the list matters)."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[dict[str, float]] = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append({name: float(value) for name, value in (logs or {}).items()})


class LearningRateRecorder(keras.callbacks.Callback):
    """The learning rate each batch trains with (read after the Horovod LR callbacks set it), and the
    weights at each epoch end."""

    def __init__(self) -> None:
        super().__init__()
        self.per_batch: list[float] = []
        self.weights_per_epoch: list[list[np.ndarray]] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.per_batch.append(float(to_numpy(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch, logs=None):
        self.weights_per_epoch.append([to_numpy(variable) for variable in self.model.weights])


def record_averaging(hvd, writer: ScopedWriter) -> None:
    """Same initial weights on all ranks, different data: fit must equal one process on all the data."""
    rank, size = hvd.rank(), hvd.size()
    features, labels = rank_data(rank)
    distributed = model(SAME_INIT_SEED)
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
    distributed.compile(optimizer=optimizer, loss="mse")
    distributed.fit(features, labels, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    writer.arrays("average/weights", distributed.weights)
    writer.arrays("average/optimizer", optimizer_variables(distributed.optimizer))

    all_features, all_labels = global_batches(size, 1)
    reference = plain_fit(keras.optimizers.SGD(0.05, momentum=0.9), all_features, all_labels, BATCH * size)
    writer.arrays("average/reference_weights", reference.weights)
    writer.arrays("average/reference_optimizer", optimizer_variables(reference.optimizer))
    local_only = plain_fit(keras.optimizers.SGD(0.05, momentum=0.9), features, labels, BATCH)
    writer.arrays("average/local_only_weights", local_only.weights)


def record_backward_passes(hvd, writer: ScopedWriter) -> None:
    """backward_passes_per_step=2: two local batches are summed, averaged over ranks and passes,
    then applied once."""
    rank, size = hvd.rank(), hvd.size()
    features, labels = rank_data(rank)
    distributed = model(SAME_INIT_SEED)
    optimizer = hvd.DistributedOptimizer(
        keras.optimizers.SGD(0.05), backward_passes_per_step=2, average_aggregated_gradients=True
    )
    distributed.compile(optimizer=optimizer, loss="mse")
    distributed.fit(features, labels, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    writer.arrays("bpps/weights", distributed.weights)
    writer.record["bpps_iterations"] = int(to_numpy(distributed.optimizer.iterations))

    all_features, all_labels = global_batches(size, 2)
    reference = plain_fit(keras.optimizers.SGD(0.05), all_features, all_labels, 2 * BATCH * size)
    writer.arrays("bpps/reference_weights", reference.weights)


def record_callbacks(hvd, writer: ScopedWriter) -> None:
    """Different initial weights per rank; BroadcastGlobalVariablesCallback and MetricAverageCallback."""
    rank = hvd.rank()
    features, labels = rank_data(rank)
    validation = rank_data(rank + 10, rows=BATCH)
    distributed = model(500 + rank)
    writer.arrays("callbacks/initial", distributed.weights)
    distributed.compile(
        optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse", metrics=["mae"]
    )
    before_average, after_average = LogRecorder(), LogRecorder()
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        before_average,
        hvd.callbacks.MetricAverageCallback(),
        after_average,
    ]
    history = distributed.fit(
        features,
        labels,
        batch_size=BATCH,
        epochs=2,
        shuffle=False,
        verbose=0,
        validation_data=validation,
        callbacks=callbacks,
    )
    writer.arrays("callbacks/weights", distributed.weights)
    writer.arrays("callbacks/optimizer", optimizer_variables(distributed.optimizer))
    writer.record["logs_before_average"] = before_average.epochs
    writer.record["logs_after_average"] = after_average.epochs
    writer.record["history"] = {name: [float(v) for v in values] for name, values in history.history.items()}


def record_learning_rate_callbacks(hvd, writer: ScopedWriter) -> None:
    """Warmup for 2 epochs, then a schedule that sets the rate to 0 for epoch 2."""
    features, labels = rank_data(hvd.rank())
    distributed = model(SAME_INIT_SEED)
    distributed.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    recorder = LearningRateRecorder()
    callbacks = [
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1, warmup_epochs=2, verbose=0),
        hvd.callbacks.LearningRateScheduleCallback(
            initial_lr=0.1, multiplier=lambda epoch: 0.0, start_epoch=2
        ),
        recorder,
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = distributed.fit(
            features, labels, batch_size=BATCH, epochs=3, shuffle=False, verbose=0, callbacks=callbacks
        )
    writer.record["lr_per_batch"] = recorder.per_batch
    writer.record["lr_history"] = [float(value) for value in history.history["lr"]]
    writer.record["lr_warnings"] = sorted(
        {str(warning.message) for warning in caught if "momentum" in str(warning.message)}
    )
    for epoch, weights in enumerate(recorder.weights_per_epoch):
        writer.arrays(f"lr/weights_epoch{epoch}", weights)


def record_mixed_precision_overflow(hvd, writer: ScopedWriter) -> None:
    """mixed_float16: compile wraps the Horovod optimizer in a LossScaleOptimizer. The last rank's first
    batch overflows float16, so only its gradients are not finite; every rank must skip that step alike
    (and halve the loss scale) instead of the last rank missing the allreduce the others enter."""
    rank, size = hvd.rank(), hvd.size()
    # Small values: with the initial loss scale of 2**15 nothing else overflows float16.
    rng = np.random.default_rng(4000 + rank)
    features = rng.normal(size=(STEPS * BATCH, 4)).astype(np.float32)
    labels = (0.1 * rng.normal(size=(STEPS * BATCH, 1))).astype(np.float32)
    if rank == size - 1:
        features[0, 0] = 1e6  # above float16's maximum (65504)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        distributed = model(SAME_INIT_SEED)
        writer.arrays("mixed/initial", distributed.weights)
        distributed.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
        distributed.fit(features, labels, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    optimizer = distributed.optimizer
    writer.arrays("mixed/weights", distributed.weights)
    writer.record["mixed_optimizer"] = type(optimizer).__name__
    # Keras 3 names the current scale dynamic_scale, tf-keras loss_scale.
    scale = optimizer.dynamic_scale if hasattr(optimizer, "dynamic_scale") else optimizer.loss_scale
    writer.record["mixed_loss_scale"] = float(to_numpy(scale))


def main() -> None:
    # Both front ends in one process: one TF start-up per rank instead of two.
    import horovod.keras as hvd_keras
    import horovod.tensorflow.keras as hvd_tf_keras

    hvd_tf_keras.init()
    writer = RankWriter(sys.argv[1], hvd_tf_keras.rank(), hvd_tf_keras.size())
    for hvd in (hvd_tf_keras, hvd_keras):
        scoped = writer.scoped(hvd.__name__)
        record_averaging(hvd, scoped)
        record_callbacks(hvd, scoped)
        record_learning_rate_callbacks(hvd, scoped)
    # horovod.keras.DistributedOptimizer has no backward_passes_per_step parameter.
    record_backward_passes(hvd_tf_keras, writer.scoped(hvd_tf_keras.__name__))
    record_mixed_precision_overflow(hvd_tf_keras, writer.scoped(hvd_tf_keras.__name__))
    writer.close()


if __name__ == "__main__":
    main()
