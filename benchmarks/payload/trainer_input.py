"""Figures 6, 13 and 14: this rank's share of the train channel, prepared and batched by the managed
trainer's own functions (list, deal, count, parse, the epoch's seeded shuffle, exact batches, prefetch),
for payloads that read it without training."""

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf
from sagetrain.trainer.hyperparameters import settings_from
from sagetrain.trainer.job import trainer_job
from sagetrain.trainer.preparation import TRAIN, prepare
from sagetrain.trainer.readers import batches_by_epoch
from sagetrain.trainer.sharding import batch_sizes, steps_per_epoch


@dataclass(frozen=True)
class TrainerInput:
    """The job's hyperparameters, the train channel's folder, this rank's batch size, and
    ``batches(epoch, skip_steps)``, the epoch's batches as the trainer takes them."""

    hyperparameters: Mapping[str, Any]
    train_dir: Path
    batch: int
    batches: Callable[[int, int], tf.data.Dataset]


def trainer_input(model_module: Path) -> TrainerInput:
    """Prepare ``model_module`` on this rank's job as the trainer does. The trainer plans its steps from
    every rank's count; the figures' files all hold as many records, so every rank plans the same steps
    from its own count alone."""
    job = trainer_job(os.environ)
    settings = settings_from(job.config.hyperparameters, job.paths.hyperparameters)
    batch = settings.per_rank_batch_size(job.ranks.size)
    prepared = prepare(job, settings, model_module, batch)
    steps = steps_per_epoch([prepared.train.count], batch)
    batches = batches_by_epoch(
        prepared.train,
        sizes=batch_sizes(prepared.train.count, steps, batch),
        job_seed=settings.seed,
        shard_index=job.ranks.rank,
        shuffle_buffer=settings.shuffle_buffer,
    )
    return TrainerInput(job.hyperparameters, job.paths.channel_dir(TRAIN), batch, batches)
