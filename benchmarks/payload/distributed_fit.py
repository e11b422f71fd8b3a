"""Figure 9: Keras `fit` of the figure-5 model on the same TFRecord data over every host of the job,
under MultiWorkerMirroredStrategy when the job has TF_CONFIG, else with Horovod's DistributedOptimizer
over MPI. Both read every file and keep their share of the records (tf.data DATA sharding, and
`Dataset.shard` by rank), with the same global batch, so both do the same work per epoch. Prints
``epoch=N`` at the end of every epoch; the harness times those lines on algo-1.

The figure passes none of the hyperparameters below; `benchmarks/lab/mwms_variants.py` passes them to
find where MultiWorkerMirroredStrategy's time goes (each absent one leaves the figure's job as it is):

- ``collective``, ``bytes_per_pack``, ``collective_timeout``: the strategy's CommunicationOptions;
- ``auto_shard``: the tf.data auto-shard policy (``DATA``, the figure's, or ``FILE``);
- ``step_results``: how each step's loss and metric results are reduced across the workers:
  ``mean`` or ``packed`` (the image's Keras: one collective per dtype for them all; ``packed`` was this
  payload's own packing before the image's Keras did it), ``per-value`` (one collective per value, the
  image's Keras before) or ``local`` (none: each worker's own values, as Horovod's `fit` has them);
- ``steps_per_epoch``: the dataset repeats and every epoch is that many steps, so the distributed
  iterator makes no per-step collective to agree that every worker still has data;
- ``partial_batches``: false turns the iterator's per-step agreement off without repeating the dataset
  (`experimental_enable_get_next_as_optional`; safe here only because every worker gets as many batches);
- ``steps_per_execution``: Keras's steps per call of the training function (both engines);
- ``count_collectives``: prints ``collectives={...}`` at the end on rank 0: the all-reduces TensorFlow
  traced, by the function they were traced in (each function is traced once: per step, per call)."""

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf
from model_module import build_model, parse_record
from step_reductions import one_collective_per_value

hp = json.loads(os.environ["SM_HPS"])
files = sorted(str(path) for path in Path(os.environ["SM_CHANNEL_TRAIN"]).glob("*.tfrecord"))
keras.utils.set_random_seed(hp.get("seed", 0))
steps_per_epoch = hp.get("steps_per_epoch")


def records() -> tf.data.Dataset:
    return tf.data.TFRecordDataset(files).map(
        lambda record: parse_record(record, hp), num_parallel_calls=tf.data.AUTOTUNE
    )


class EpochLine(keras.callbacks.Callback):
    """On rank 0 only (the MPI engine gathers every rank's output on algo-1)."""

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if os.environ.get("SAGETRAIN_RANK", "0") == "0":
            print(f"epoch={epoch + 1} loss={(logs or {})['loss']:.4f}", flush=True)


def communication_options() -> tf.distribute.experimental.CommunicationOptions | None:
    if not {"collective", "bytes_per_pack", "collective_timeout"} & hp.keys():
        return None
    return tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=hp.get("bytes_per_pack", 0),
        timeout_seconds=hp.get("collective_timeout"),
        implementation=hp.get("collective", "AUTO"),
    )


def reduce_step_results(how: str) -> None:
    """Replaces the image's Keras reduction of each step's results under a multi-worker strategy."""
    from keras.src.backend.tensorflow import trainer

    image_reduction = trainer.reduce_per_replica

    def local(values: object, strategy: tf.distribute.Strategy, reduction: str) -> object:
        return image_reduction(values, strategy, "first" if reduction == "auto" else reduction)

    def per_value(values: object, strategy: tf.distribute.Strategy, reduction: str) -> object:
        if reduction != "auto":
            return image_reduction(values, strategy, reduction)
        return one_collective_per_value(values, strategy)

    trainer.reduce_per_replica = {"local": local, "per-value": per_value}[how]


def count_collectives() -> Counter:
    """The strategy's all-reduces (cross_device_utils calls collective_ops.all_reduce_v2), counted as
    they are traced, by the name of the function traced (``eager`` outside any)."""
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import collective_ops

    counts: Counter = Counter()
    all_reduce = collective_ops.all_reduce_v2

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[ops.get_default_graph().name if ops.inside_function() else "eager"] += 1
        return all_reduce(*args, **kwargs)

    collective_ops.all_reduce_v2 = counted
    return counts


def repeated(dataset: tf.data.Dataset) -> tf.data.Dataset:
    return dataset.repeat() if steps_per_epoch else dataset


shuffle = {"buffer_size": hp.get("shuffle_buffer", 10_000), "seed": hp.get("seed", 0)}
compile_options = {"steps_per_execution": hp.get("steps_per_execution", 1)}
if "TF_CONFIG" in os.environ:
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options())
    traced = count_collectives() if hp.get("count_collectives") else None
    if not hp.get("partial_batches", True):
        strategy.extended.experimental_enable_get_next_as_optional = False
    if hp.get("step_results", "mean") not in ("mean", "packed"):
        reduce_step_results(hp["step_results"])
    options = tf.data.Options()
    policy = hp.get("auto_shard", "DATA")
    options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
    dataset = repeated(records().shuffle(**shuffle)).batch(hp["batch_size"]).with_options(options)
    with strategy.scope():
        model = build_model(hp)
        model.compile(
            optimizer=keras.optimizers.Adam(hp.get("learning_rate", 0.001)),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            **compile_options,
        )
    callbacks: list = [EpochLine()]
else:
    import horovod.tensorflow.keras as hvd

    hvd.init()
    local_batch = hp["batch_size"] // hvd.size()
    dataset = repeated(records().shard(hvd.size(), hvd.rank()).shuffle(**shuffle)).batch(local_batch)
    model = build_model(hp)
    optimizer = hvd.DistributedOptimizer(keras.optimizers.Adam(hp.get("learning_rate", 0.001)))
    model.compile(
        optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"], **compile_options
    )
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), EpochLine()]
    traced = None
model.fit(
    dataset.prefetch(tf.data.AUTOTUNE),
    epochs=hp["epochs"],
    steps_per_epoch=steps_per_epoch,
    verbose=0,
    callbacks=callbacks,
)
if traced is not None and os.environ.get("SAGETRAIN_RANK", "0") == "0":
    print(f"collectives={json.dumps(dict(traced))}", flush=True)
