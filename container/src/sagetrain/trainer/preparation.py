"""Everything a rank does before its first collective: load the module, build and compile the model, open
and count its share of every channel, and build all variables on one real batch.

Any failure here is caught by the caller and agreed across ranks before anything else, so a rank that
fails never leaves the others waiting in a collective.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from sagetrain.errors import UserError
from sagetrain.trainer.channels import open_channel
from sagetrain.trainer.contract import (
    ModelModule,
    build_and_compile,
    describe_exception,
    keras_api,
    load_module,
)
from sagetrain.trainer.hyperparameters import TrainerSettings
from sagetrain.trainer.job import TrainerJob
from sagetrain.trainer.readers import RankRecords, rank_records, read_batches

TRAIN, VALIDATION, TEST = "train", "validation", "test"


@dataclass(frozen=True)
class Prepared:
    module: ModelModule
    keras: Any
    model: Any
    optimizer: Any
    loss_tracker: Any
    train: RankRecords
    validation: RankRecords | None
    test: RankRecords | None


def _records(
    job: TrainerJob, module: ModelModule, settings: TrainerSettings, name: str
) -> RankRecords | None:
    spec = job.channel(name)
    if spec is None:
        return None
    folder = job.paths.channel_dir(spec.name)
    channel = open_channel(
        spec, folder, job.ranks, reader_needs_format=module.input_fn is None, shared_in=job.listings_dir
    )
    return rank_records(channel, module, job.hyperparameters, settings.label_column)


def _first_batch(records: RankRecords, batch_size: int) -> Any:
    """The channel's first batch on this rank (None without records): reading it here turns the reader's
    errors about the data (a parse_record that does not match the records, say) into one sentence before
    the first collective."""
    return next(read_batches(records, records.dataset.batch(batch_size).take(1)), None)


def _build_state(prepared_model: Any, records: RankRecords, module: ModelModule, batch_size: int) -> None:
    """Create every variable (layers, compiled loss and metrics, optimizer slots) eagerly, as Keras' own
    fit does before tracing: variables cannot be created inside the traced step."""
    model = prepared_model
    sample = _first_batch(records, batch_size)
    if sample is None:
        raise UserError(f"channel {records.channel.name!r} yielded no record on this rank.")
    x, y = sample
    features_spec, label_spec = records.dataset.element_spec
    try:
        y_pred = model(x, training=False)
        model.compute_loss(x=x, y=y, y_pred=y_pred)
        model.compute_metrics(x, y, y_pred, None)
    except Exception as error:
        raise UserError(
            f"the model from build_model in {module.path.name} cannot train on the records of channel "
            f"{records.channel.name!r} (features {_spec_text(features_spec)}, "
            f"label {_spec_text(label_spec)}): "
            f"{describe_exception(error)}"
        ) from error
    model.reset_metrics()
    optimizer = model.optimizer
    if hasattr(optimizer, "build"):
        optimizer.build(model.trainable_variables)
    else:  # tf_keras.optimizers.legacy: the same, under its own name
        optimizer._create_all_weights(model.trainable_variables)


def _spec_text(value: Any) -> str:
    """Per-record specs as ``float32[7]``: what the model receives, less the batch dimension."""
    return str(tf.nest.map_structure(lambda spec: f"{spec.dtype.name}{list(spec.shape)}", value))


def prepare(job: TrainerJob, settings: TrainerSettings, module_path: Path, batch_size: int) -> Prepared:
    keras = keras_api(os.environ)
    module = load_module(module_path)
    if job.channel(TRAIN) is None:
        raise UserError(
            f"the managed trainer needs a 'train' channel; this job has "
            f"{[spec.name for spec in job.config.channels]}."
        )
    keras.utils.set_random_seed(settings.seed)
    model = build_and_compile(module, job.hyperparameters, settings.compile)
    train = _records(job, module, settings, TRAIN)
    if train is None:
        raise UserError("the managed trainer needs a 'train' channel.")
    validation = _records(job, module, settings, VALIDATION)
    test = _records(job, module, settings, TEST)
    if train.count > 0:
        _build_state(model, train, module, batch_size)
    for evaluation in (validation, test):
        if evaluation is not None:
            _first_batch(evaluation, batch_size)
    return Prepared(
        module=module,
        keras=keras,
        model=model,
        optimizer=model.optimizer,
        loss_tracker=keras.metrics.Mean(name="loss"),
        train=train,
        validation=validation,
        test=test,
    )
