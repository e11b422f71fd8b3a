"""Keras 3 training under a tf.distribute strategy, as every worker of a job runs it.

Usage: fit_scenario.py OUT_DIR MODE SHARED_DIR REPLICAS
  MODE mwms: MultiWorkerMirroredStrategy from TF_CONFIG (one CPU replica per worker);
  MODE mirrored: MirroredStrategy over REPLICAS logical CPU devices in this process;
  MODE single: no strategy, the reference: one process on the same global batches.
SHARED_DIR is the folder every worker's callbacks write to (a shared checkpoint folder); it holds
`files/*.csv` (uneven row counts) for the FILE auto-shard case. Writes worker<i>.npz/.json.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

PER_REPLICA_BATCH = 8
TRAIN_STEPS = 6
VALIDATION_STEPS = 2


class ExampleCount(keras.metrics.Metric):
    """How many examples the metric saw (its variable is summed across replicas when read)."""

    def __init__(self, name: str = "examples") -> None:
        super().__init__(name=name)
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        self.count.assign_add(keras.ops.cast(keras.ops.shape(y_true)[0], "float32"))

    def result(self):
        return keras.ops.copy(self.count)  # a value, not the variable logs would alias


class LabelSum(keras.metrics.Metric):
    """The sum of the labels seen: with ExampleCount, each example counted exactly once."""

    def __init__(self, name: str = "label_sum") -> None:
        super().__init__(name=name)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        self.total.assign_add(keras.ops.sum(keras.ops.cast(y_true, "float32")))

    def result(self):
        return keras.ops.copy(self.total)


class Recorder(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[int] = []
        self.epoch_logs: list[dict] = []
        self.batch_losses: list[float] = []

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self.epochs.append(epoch)

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.epoch_logs.append({name: float(value) for name, value in (logs or {}).items()})

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.batch_losses.append(float(logs["loss"]))


def make_strategy(mode: str, replicas: int) -> tuple[tf.distribute.Strategy, int]:
    """The strategy and this worker's task index."""
    if mode == "mwms":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        return strategy, int(strategy.cluster_resolver.task_id)
    if mode == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
        )
        return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)]), 0
    return tf.distribute.get_strategy(), 0


def regression_data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.RandomState(seed)
    x = generator.uniform(-1, 1, size=(rows, 4)).astype("float32")
    y = (x @ np.array([[0.5], [-1.0], [0.25], [2.0]], dtype="float32") + 0.1).astype("float32")
    return x, y


def build(strategy: tf.distribute.Strategy, seed: int) -> keras.Model:
    with strategy.scope():
        # A different seed per worker: identical weights afterwards mean the chief's were broadcast.
        keras.utils.set_random_seed(seed)
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
            loss="mse",
            metrics=["mae", ExampleCount(), LabelSum()],
        )
    return model


def record_saves(model: keras.Model, saves: list[str]) -> None:
    """Note every path this worker's callbacks save to (the real methods still run)."""
    for name in ("save", "save_weights"):
        method = getattr(model, name)

        def recording(filepath, *args, _method=method, **kwargs):
            saves.append(str(filepath))
            return _method(filepath, *args, **kwargs)

        object.__setattr__(model, name, recording)


def file_dataset(folder: Path, global_batch: int, policy: tf.data.experimental.AutoShardPolicy):
    files = tf.data.Dataset.list_files(str(folder / "*.csv"), shuffle=False)
    lines = files.interleave(lambda name: tf.data.TextLineDataset(name), cycle_length=1)

    def parse(line):
        values = tf.io.decode_csv(line, [0.0] * 5)
        return tf.stack(values[:4]), tf.stack(values[4:])

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    return lines.map(parse).batch(global_batch).with_options(options)


def with_policy(dataset: tf.data.Dataset, policy: tf.data.experimental.AutoShardPolicy) -> tf.data.Dataset:
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    return dataset.with_options(options)


def step_results(strategy: tf.distribute.Strategy) -> dict:
    """What Keras's reduction of a step's results (the one `fit` and `evaluate` steps call) makes of
    values that differ by replica, in two dtypes and two shapes, and how many all-reduces tracing it
    made (TensorFlow's multi-worker collectives all go through collective_ops.all_reduce_v2)."""
    from keras.src.backend.tensorflow.trainer import reduce_per_replica
    from tensorflow.python.ops import collective_ops

    same_everywhere = tf.constant(0.25)  # captured: no device of its own, as a metric's variable read

    def results() -> dict:
        context = tf.distribute.get_replica_context()
        replica = tf.cast(context.replica_id_in_sync_group, "float32")
        return {
            "same": same_everywhere,
            "loss": replica + 1.0,
            "per_class": tf.stack([replica, 2.0 * replica, 3.0 * replica]),
            "examples": (replica + 1.0) * 10.0,
            "weight": tf.cast(replica, "float64") * 4.0,
        }

    @tf.function
    def step() -> dict:
        return reduce_per_replica(strategy.run(results), strategy, reduction="auto")

    all_reduces = 0
    all_reduce = collective_ops.all_reduce_v2

    def counted(*args: object, **kwargs: object) -> tf.Tensor:
        nonlocal all_reduces
        all_reduces += 1
        return all_reduce(*args, **kwargs)

    collective_ops.all_reduce_v2 = counted
    try:
        reduced = step()
    finally:
        collective_ops.all_reduce_v2 = all_reduce
    values = {name: np.asarray(value).tolist() for name, value in reduced.items()}
    dtypes = {name: value.dtype.name for name, value in reduced.items()}
    return {"all_reduces": all_reduces, "values": values, "dtypes": dtypes}


def main() -> None:
    out_dir, mode, shared, replicas = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    keras.config.disable_traceback_filtering()
    strategy, index = make_strategy(mode, replicas)
    global_batch = PER_REPLICA_BATCH * replicas
    x, y = regression_data(global_batch * TRAIN_STEPS, seed=1)
    x_val, y_val = regression_data(global_batch * VALIDATION_STEPS, seed=2)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    validation = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(global_batch)
    arrays: dict[str, np.ndarray] = {}
    record: dict = {"index": index, "pid": os.getpid(), "replicas": strategy.num_replicas_in_sync}

    def keep(prefix: str, values) -> None:
        for position, value in enumerate(values):
            arrays[f"{prefix}/{position}"] = np.asarray(value)

    model = build(strategy, seed=100 + index)
    saves: list[str] = []
    record_saves(model, saves)
    recorder = Recorder()
    callbacks = [
        keras.callbacks.ModelCheckpoint(str(shared / "ckpt-{epoch}.keras")),
        keras.callbacks.BackupAndRestore(str(shared / "backup"), delete_checkpoint=False),
        recorder,
    ]
    history = model.fit(train, epochs=2, validation_data=validation, callbacks=callbacks, verbose=0)
    keep("fit/weights", model.get_weights())
    keep("fit/optimizer", [v.numpy() for v in model.optimizer.variables])
    record["fit"] = {
        "history": history.history,
        "batch_losses": recorder.batch_losses,
        "saves": saves,
        "evaluate": model.evaluate(validation, verbose=0, return_dict=True),
    }
    keep("predict", [model.predict(validation, verbose=0)])

    # A restart: a new model (other initial weights) resumes from the chief's backup.
    resumed = build(strategy, seed=200 + index)
    recorder = Recorder()
    backup = keras.callbacks.BackupAndRestore(str(shared / "backup"), delete_checkpoint=False)
    resumed.fit(train, epochs=3, callbacks=[backup, recorder], verbose=0)
    keep("resume/weights", resumed.get_weights())
    record["resume"] = {"epochs": recorder.epochs, "logs": recorder.epoch_logs}

    # The first model trains on (the resumed one keeps its restored initial epoch).
    # Unknown cardinality, no steps_per_epoch: every example once per epoch, epochs end together.
    recorder = Recorder()
    unknown = train.filter(lambda features, labels: True)
    model.fit(unknown, epochs=2, callbacks=[recorder], verbose=0)
    keep("unknown/weights", model.get_weights())
    record["unknown"] = {"cardinality": int(unknown.cardinality()), "logs": recorder.epoch_logs}

    # EarlyStopping on a metric every worker sees alike: all stop after the same epoch (the baseline
    # is never beaten, so training stops once patience runs out, after epoch 2).
    stopping = keras.callbacks.EarlyStopping(monitor="loss", patience=1, baseline=0.0)
    record["early_stopping_epochs"] = len(model.fit(train, epochs=6, callbacks=[stopping], verbose=0).epoch)

    policies = tf.data.experimental.AutoShardPolicy
    per_replica = int(PER_REPLICA_BATCH)
    record["sharding"] = {
        # The whole finite dataset: each example once across workers.
        "DATA": model.evaluate(with_policy(validation, policies.DATA), verbose=0, return_dict=True),
        "FILE": model.evaluate(
            file_dataset(shared / "files", global_batch, policies.FILE), verbose=0, return_dict=True
        ),
        # One step: sharded, the workers split the first global batch; not sharded (OFF), each
        # worker reads the dataset from its start, so every worker reads the same first rows.
        "DATA_first_step": model.evaluate(
            with_policy(validation, policies.DATA), steps=1, verbose=0, return_dict=True
        ),
        "OFF_first_step": model.evaluate(
            with_policy(validation, policies.OFF), steps=1, verbose=0, return_dict=True
        ),
        "first_global_batch_label_sum": float(y_val[:global_batch].sum()),
        "first_replica_batch_label_sum": float(y_val[:per_replica].sum()),
    }

    record["step_results"] = step_results(strategy)

    # TensorBoard's writers (the summaries need the tensorboard package, which the image lacks).
    board = keras.callbacks.TensorBoard(str(shared / "tensorboard"), write_graph=False)
    board.set_model(model)
    board.on_train_begin()
    board.on_train_end()
    record["leftover_temporary_folders"] = [
        str(path) for path in Path(tempfile.gettempdir()).glob("keras-worker-*")
    ]

    np.savez(out_dir / f"worker{index}.npz", **arrays)
    (out_dir / f"worker{index}.json").write_text(json.dumps(record, indent=1, default=float))


if __name__ == "__main__":
    main()
