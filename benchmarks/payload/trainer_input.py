"""Figures 6, 13 and 14: this rank's share of the train channel, prepared and batched by the managed
trainer's own functions (list, deal, count, parse, the epoch's seeded shuffle, exact batches, prefetch,
unshuffled epochs as one repeated pipeline), for payloads that read it without training."""

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagetrain.trainer.hyperparameters import settings_from
from sagetrain.trainer.job import TrainerJob, trainer_job
from sagetrain.trainer.preparation import TRAIN, Prepared, prepare
from sagetrain.trainer.readers import EpochBatches
from sagetrain.trainer.sharding import batch_sizes, steps_per_epoch


@dataclass(frozen=True)
class TrainerInput:
    """The job's hyperparameters, the train channel's folder, this rank's batch size, the prepared model
    module, the steps of an epoch, and ``epochs_up_to(last_epoch)``, the batches of epochs up to
    ``last_epoch`` as the trainer takes them."""

    hyperparameters: Mapping[str, Any]
    train_dir: Path
    batch: int
    prepared: Prepared
    steps: int
    epochs_up_to: Callable[[int], EpochBatches]


def own_count_only(count: int) -> Sequence[int]:
    return [count]


def trainer_input(
    model_module: Path,
    job: TrainerJob | None = None,
    every_rank_count: Callable[[int], Sequence[int]] = own_count_only,
) -> TrainerInput:
    """Prepare ``model_module`` on this rank's job (``job``, or the one the environment describes) as the
    trainer does. The trainer plans its steps from every rank's count, which ``every_rank_count`` gathers
    from this rank's; by default every rank plans from its own count alone, which the figures' channels
    allow: their files all hold as many records."""
    job = trainer_job(os.environ) if job is None else job
    settings = settings_from(job.config.hyperparameters, job.paths.hyperparameters)
    batch = settings.per_rank_batch_size(job.ranks.size)
    prepared = prepare(job, settings, model_module, batch)
    steps = steps_per_epoch(every_rank_count(prepared.train.count), batch)

    def epochs_up_to(last_epoch: int) -> EpochBatches:
        return EpochBatches(
            prepared.train,
            sizes=batch_sizes(prepared.train.count, steps, batch),
            job_seed=settings.seed,
            shard_index=job.ranks.rank,
            shuffle_buffer=settings.shuffle_buffer,
            last_epoch=last_epoch,
        )

    return TrainerInput(
        job.hyperparameters, job.paths.channel_dir(TRAIN), batch, prepared, steps, epochs_up_to
    )
