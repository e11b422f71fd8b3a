"""The managed trainer from start to finish on one rank: parse → prepare → connect → agree (agreement.py)
→ resume (restore and broadcast) → train → finish (evaluate, export), the last three steps of a
``TrainingRun``.
Side effects (signals, files, printing) live here and in the small writers.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from sagetrain.contracts import ERROR_FILE_VAR
from sagetrain.errors import ExitCode, PlatformError, SagetrainError, Terminated, UserError
from sagetrain.trainer import checkpoints as ckpt
from sagetrain.trainer.agreement import RankFailure, RankOutcome, agree, records_per_rank
from sagetrain.trainer.collectives import Collectives, make_collectives
from sagetrain.trainer.contract import describe_exception
from sagetrain.trainer.epochlog import epoch_line, evaluation_line, print_line, write_metrics
from sagetrain.trainer.errorfile import report_failure
from sagetrain.trainer.export import export_model
from sagetrain.trainer.hyperparameters import TrainerSettings, settings_from
from sagetrain.trainer.job import TrainerJob, trainer_job
from sagetrain.trainer.loop import (
    LearningRatePlan,
    evaluate,
    learning_rate_plan,
    local_metrics,
    make_eval_step,
    make_train_step,
    mean_metrics,
    model_variables,
    optimizer_variables,
    reset_metrics,
    set_learning_rate,
    values_of,
)
from sagetrain.trainer.preparation import TEST, TRAIN, VALIDATION, Prepared, prepare
from sagetrain.trainer.progress import EpochPlace, EpochProgress
from sagetrain.trainer.readers import (
    READ_ERRORS,
    EpochBatches,
    describe_read_error,
    raised_by_input,
    read_error,
)
from sagetrain.trainer.sharding import (
    batch_sizes,
    check_has_records,
    check_records_per_rank,
    records_through_step,
    steps_per_epoch,
)
from sagetrain.trainer.signals import StopRequest
from sagetrain.trainer.tensorboard import EpochScalars


@dataclass
class RankDiagnostics:
    """Per-rank facts written to the trainer report folder (contracts.TRAINER_REPORT_DIR_VAR) when set:
    what this rank read and computed, so tests (and people debugging a job) can check exactly-once data
    and cross-rank agreement. (Not launch/events.RankReport, a rank's account to the launcher.)"""

    rank: int
    size: int
    records: int = 0
    steps_per_epoch: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    resumed_from: dict[str, int] | None = None
    epochs: list[dict[str, Any]] = field(default_factory=list)
    test: dict[str, Any] | None = None

    def write(self, directory: Path | None, prepared: Prepared) -> None:
        if directory is None:
            return
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"rank-{self.rank}.json").write_text(json.dumps(self.__dict__, indent=1))
        values = values_of(model_variables(prepared))
        np.savez(directory / f"rank-{self.rank}-weights.npz", *values)


@dataclass(frozen=True)
class LocalSetup:
    """What a rank has before its first collective: the prepared model and channels, rank 0's checkpoint
    (None elsewhere, and when there is none), the user's learning rate."""

    prepared: Prepared
    checkpoint: ckpt.Checkpoint | None
    learning_rate: LearningRatePlan


def _local_setup(job: TrainerJob, settings: TrainerSettings, module_path: Path, batch: int) -> LocalSetup:
    prepared = prepare(job, settings, module_path, batch)
    checkpoint = None
    if job.ranks.rank == 0:
        latest = ckpt.latest_checkpoint(job.checkpoint_dir)
        if latest is not None:
            checkpoint = ckpt.read_checkpoint(latest)
            ckpt.check_matches(
                checkpoint,
                [tuple(value.shape) for value in values_of(model_variables(prepared))],
                [tuple(value.shape) for value in values_of(optimizer_variables(prepared))],
            )
    # Read before any restore: a restored optimizer carries the scaled/warmed-up rate, not the user's.
    plan = learning_rate_plan(prepared, settings, job.ranks.size, steps_per_epoch=1)
    return LocalSetup(prepared, checkpoint, plan)


def _records_held(prepared: Prepared) -> dict[str, int]:
    """This rank's records of each channel it has, as it tells the other ranks."""
    channels = ((TRAIN, prepared.train), (VALIDATION, prepared.validation), (TEST, prepared.test))
    return {name: records.count for name, records in channels if records is not None}


def _prepare_on_every_rank(
    job: TrainerJob, settings: TrainerSettings, collectives: Collectives, module_path: Path, batch: int
) -> tuple[LocalSetup, tuple[RankOutcome, ...]]:
    """This rank's setup and every rank's outcome, once all ranks have prepared and connected; if any rank
    failed, every rank raises the first failure's error here, and so when any rank lacks records of a
    channel."""
    setup: LocalSetup | None = None
    failure: RankFailure | None = None
    local_error: BaseException | None = None
    try:
        setup = _local_setup(job, settings, module_path, batch)
    except SagetrainError as error:
        failure, local_error = RankFailure(int(error.exit_code), str(error)), error
    except Exception as error:
        failure = RankFailure(
            int(ExitCode.PLATFORM_ERROR),
            f"the managed trainer failed while preparing: {describe_exception(error)}",
        )
        local_error = error
    records = _records_held(setup.prepared) if setup is not None else {}
    collectives.connect()  # a rank that failed connects too: the others learn why
    outcomes = agree(collectives, RankOutcome(failure, records), local_error)
    if setup is None:
        raise PlatformError("preparation failed without a reported cause.")
    check_records_per_rank(TRAIN, records_per_rank(outcomes, TRAIN))
    for name in (VALIDATION, TEST):
        if name in records:
            check_has_records(name, records_per_rank(outcomes, name))
    return setup, outcomes


@dataclass(frozen=True)
class EpochShape:
    """Every rank's epoch: the same number of steps, this rank's batch sizes, the learning rate plan; and
    what every rank's batches add up to (``records_per_rank``, ``batch``, ``take_all`` as dealt)."""

    steps: int
    sizes: tuple[int, ...]
    learning_rate: LearningRatePlan | None
    records_per_rank: tuple[int, ...]
    batch: int
    take_all: bool

    def samples_through(self, step: int) -> int:
        """The global samples of an epoch's first ``step`` steps."""
        return records_through_step(
            self.records_per_rank, self.steps, self.batch, step, take_all=self.take_all
        )


def _epoch_shape(
    settings: TrainerSettings, setup: LocalSetup, train_counts: list[int], batch: int
) -> EpochShape:
    natural_steps = steps_per_epoch(train_counts, batch)
    steps = steps_per_epoch(train_counts, batch, settings.steps_per_epoch)
    take_all = steps == natural_steps
    sizes = batch_sizes(setup.prepared.train.count, steps, batch, take_all=take_all)
    target = setup.learning_rate.target
    plan = LearningRatePlan(target, round(settings.warmup_epochs * steps)) if target is not None else None
    return EpochShape(steps, sizes, plan, tuple(train_counts), batch, take_all)


def _layout(ranks: int, batch_size: int, steps: int | None) -> str:
    text = f"{ranks} rank{'' if ranks == 1 else 's'}, batch_size {batch_size}"
    return f"{text} and {steps} steps per epoch" if steps is not None else text


class TrainingRun:
    """One rank's managed training once every rank has prepared: ``resume`` (rank 0's checkpoint or
    initial state on every rank), ``train`` (the epochs), ``finish`` (test, metrics, export). It holds
    what every step needs, the job, settings, collectives, prepared model, epoch shape and this rank's
    diagnostics, so the steps pass none of it around; ``EpochRunner`` runs the epochs on it."""

    def __init__(
        self,
        job: TrainerJob,
        settings: TrainerSettings,
        collectives: Collectives,
        setup: LocalSetup,
        outcomes: Sequence[RankOutcome],
    ) -> None:
        self.job, self.settings, self.collectives, self.setup = job, settings, collectives, setup
        self.prepared = setup.prepared
        self.batch = settings.per_rank_batch_size(job.ranks.size)
        self.shape = _epoch_shape(settings, setup, records_per_rank(outcomes, TRAIN), self.batch)
        self.diagnostics = RankDiagnostics(
            job.ranks.rank,
            job.ranks.size,
            records=self.prepared.train.count,
            steps_per_epoch=self.shape.steps,
            batch_sizes=list(self.shape.sizes),
        )

    def run(self, stop: StopRequest) -> None:
        """Resume, train, finish; this rank's diagnostics written whatever happens."""
        try:
            self.finish(self.train(self.resume(), stop))
        except tf.errors.OpError as error:
            raise UserError(
                f"training failed on rank {self.job.ranks.rank}: {describe_exception(error)}"
            ) from error
        finally:
            self.diagnostics.write(self.job.report_dir, self.prepared)

    def resume(self) -> ckpt.Progress:
        """Rank 0's checkpoint (or initial state) on every rank; where training starts."""
        meta = self._restore_and_broadcast()
        checkpoint = self.setup.checkpoint
        source = checkpoint.path if checkpoint is not None else None  # rank 0's file
        start = self._start_point(meta, source)
        if meta is not None:
            self.diagnostics.resumed_from = {
                "epochs_completed": start.epochs_completed,
                "steps_into_epoch": start.steps_into_epoch,
            }
            if self.job.ranks.rank == 0:
                self.job.notes.info(f"resuming from the checkpoint {source} ({meta.position.describe()})")
        return start

    def _restore_and_broadcast(self) -> ckpt.CheckpointMeta | None:
        checkpoint = self.setup.checkpoint
        if checkpoint is not None:
            for variable, value in zip(model_variables(self.prepared), checkpoint.model_values, strict=True):
                variable.assign(value)
            for variable, value in zip(
                optimizer_variables(self.prepared), checkpoint.optimizer_values, strict=True
            ):
                variable.assign(value)
        # The metadata travels as its JSON text: plain data across ranks, as the checkpoint file holds it.
        meta = self.collectives.broadcast_object(
            checkpoint.meta.to_json() if checkpoint is not None else None
        )
        # Rank 0's initial (or restored) state wins everywhere, whatever each rank initialised.
        self.collectives.broadcast_variables(
            model_variables(self.prepared) + optimizer_variables(self.prepared)
        )
        return ckpt.CheckpointMeta.from_json(meta) if meta is not None else None

    def _same_layout(self, meta: ckpt.CheckpointMeta) -> bool:
        """Whether this job deals the same shards and batches as the one that wrote ``meta``."""
        return (
            meta.ranks == self.job.ranks.size
            and meta.global_batch_size == self.settings.batch_size
            and meta.steps_per_epoch in (None, self.shape.steps)
        )

    def _start_point(self, meta: ckpt.CheckpointMeta | None, source: Path | None) -> ckpt.Progress:
        """Where training starts from the checkpoint ``meta`` (which rank 0 read from ``source``)."""
        if meta is None:
            return ckpt.Progress(0, 0)
        progress = meta.progress
        if progress.steps_into_epoch and not self._same_layout(meta):
            # Mid-epoch positions only mean something with the same shards and batches.
            if self.job.ranks.rank == 0:
                self.job.notes.warning(
                    f"the checkpoint {source} ({meta.position.describe()}) was written by a job with "
                    f"{_layout(meta.ranks, meta.global_batch_size, meta.steps_per_epoch)}; this job has "
                    f"{_layout(self.job.ranks.size, self.settings.batch_size, self.shape.steps)}, so epoch "
                    f"{meta.position.epoch} restarts from its first step."
                )
            progress = ckpt.Progress(progress.epochs_completed, 0)
        return progress

    def train(self, start: ckpt.Progress, stop: StopRequest) -> dict[str, float]:
        """The epochs from ``start``; the last epoch's metrics (mean over ranks)."""
        ranks, shape = self.job.ranks, self.shape
        if ranks.rank == 0:
            self.job.notes.info(
                f"{ranks.size} rank(s), {sum(shape.records_per_rank)} training records, {shape.steps} steps "
                f"per epoch, batch {self.batch} per rank (global {self.batch * ranks.size})"
            )
        runner = EpochRunner(self, stop)
        last_metrics: dict[str, float] = {}
        for epoch in range(start.epochs_completed + 1, self.settings.epochs + 1):
            runner.run_steps(epoch, start.steps_into_epoch if epoch == start.epochs_completed + 1 else 0)
            last_metrics = runner.finish_epoch(epoch)
        return last_metrics

    def finish(self, metrics: dict[str, float]) -> None:
        """Evaluate the test channel; rank 0 writes the metrics and exports the model."""
        prepared, rank = self.prepared, self.job.ranks.rank
        results = dict(metrics)
        if prepared.test is not None:
            test_local, test_mean = evaluate(
                prepared, self.collectives, prepared.test, self.batch, make_eval_step(prepared)
            )
            results.update({f"test_{name}": value for name, value in test_mean.items()})
            self.diagnostics.test = {"local": test_local, "mean": test_mean}
            if rank == 0:
                print_line(evaluation_line(test_mean))
        if rank == 0:
            write_metrics(self.job.paths.output_data_dir / "metrics.json", results)
            saved_model, keras_file = export_model(prepared.model, self.job.paths.model_dir)
            self.job.notes.info(f"exported {saved_model} and {keras_file}")

    def checkpoint(self, progress: ckpt.Progress) -> Path | None:
        """Rank 0 writes (and says so); the path it wrote, None on the other ranks."""
        job, settings = self.job, self.settings
        if job.ranks.rank != 0:
            return None
        meta = ckpt.CheckpointMeta(
            progress, settings.seed, job.ranks.size, settings.batch_size, self.shape.steps
        )
        path = ckpt.write_checkpoint(
            job.checkpoint_dir,
            meta,
            values_of(model_variables(self.prepared)),
            values_of(optimizer_variables(self.prepared)),
        )
        job.notes.info(ckpt.written_note(path, meta.position))
        return path

    def stopped(self, progress: ckpt.Progress) -> Terminated:
        """Checkpoint on SIGTERM, the error to exit with: the same sentence on every rank, naming the rank
        and host that wrote it. No rank exits before rank 0 has written: mpirun ends the whole job, with
        SIGKILL a second later, as soon as any rank exits non-zero."""
        path = self.checkpoint(progress)
        mine = (str(path), self.job.current_host) if path is not None else None
        # Rank 0 answers only once its file is in place.
        written, host = self.collectives.broadcast_object(mine)
        return Terminated(ckpt.stop_message(written, progress.position(self.shape.steps), host))


class EpochRunner:
    """Runs epochs of the traced step on this rank; every rank runs the same steps and agrees on stopping.
    Holds what only the epochs need (the traced steps, the stop flags, the TensorBoard writer) on top of
    the ``TrainingRun`` it runs for."""

    def __init__(self, training: TrainingRun, stop: StopRequest) -> None:
        self.training, self.stop = training, stop
        self.job, self.settings, self.prepared, self.shape = (
            training.job,
            training.settings,
            training.prepared,
            training.shape,
        )
        self.batches = EpochBatches(
            self.prepared.train,
            sizes=self.shape.sizes,
            job_seed=self.settings.seed,
            shard_index=self.job.ranks.rank,
            shuffle_buffer=self.settings.shuffle_buffer,
            last_epoch=self.settings.epochs,
        )
        self.train_step = make_train_step(self.prepared, training.collectives)
        self.eval_step = make_eval_step(self.prepared)
        # Made here, not at import: a tensor made before Horovod's collectives pin this rank's GPU would
        # initialise every device and make pinning fail.
        self.stop_flags = {True: tf.constant(1.0), False: tf.constant(0.0)}
        job = self.job
        tensorboard = job.tensorboard_dir
        self.writer = EpochScalars(tensorboard) if job.ranks.rank == 0 and tensorboard is not None else None
        self.reports_progress = job.ranks.rank == 0 and job.notes.shows(logging.INFO)

    def run_steps(self, epoch: int, skip: int) -> None:
        """One epoch's steps after the first ``skip`` (a resumed epoch); raises Terminated after the step
        at which any rank asked to stop, once rank 0 has written its checkpoint."""
        steps, prepared = self.shape.steps, self.prepared
        reset_metrics(prepared)
        iterator = self.batches.iterator(epoch, skip)
        progress = self._progress(epoch, skip)
        for done in range(skip + 1, steps + 1):
            if self.shape.learning_rate is not None:
                set_learning_rate(prepared, self.shape.learning_rate.at((epoch - 1) * steps + done - 1))
            if float(self._step(iterator, epoch, skip, done)) > 0:
                raise self.training.stopped(ckpt.Progress.after_step(epoch, done, steps))
            if progress is not None and (line := progress.after_step(done)) is not None:
                self.job.notes.info(line)

    def _progress(self, epoch: int, skip: int) -> EpochProgress | None:
        if not self.reports_progress:
            return None
        place = EpochPlace(epoch, self.settings.epochs, self.shape.steps)
        return EpochProgress(place, self.shape.samples_through, skip, time.monotonic)

    def _step(self, iterator: Any, epoch: int, skip: int, done: int) -> tf.Tensor:
        rank = self.job.ranks.rank
        try:
            return self.train_step(iterator, self.stop_flags[self.stop.requested])
        except tf.errors.OutOfRangeError:
            raise self._records_changed(epoch, done) from None
        except READ_ERRORS as error:
            if self.batches.came_up_short(error, skip):
                raise self._records_changed(epoch, done) from None
            # Before training only the first batch went through parse_record (the count reads no
            # record) or through an input_fn whose dataset knows its length, so a record they
            # cannot read can still fail here.
            raise _step_error(
                self.prepared, error, f" on rank {rank} at step {done} of epoch {epoch}"
            ) from error

    def _records_changed(self, epoch: int, done: int) -> UserError:
        return UserError(
            f"channel 'train' ran out of records on rank {self.job.ranks.rank} at step {done} of epoch "
            f"{epoch}, though {self.shape.steps} steps were counted at start; input_fn must return the "
            f"same records every time it is iterated."
        )

    def finish_epoch(self, epoch: int) -> dict[str, float]:
        """Average and log the epoch's metrics, evaluate, checkpoint; the metrics (mean over ranks)."""
        prepared, batch, collectives = self.prepared, self.training.batch, self.training.collectives
        local = local_metrics(prepared)
        averaged = mean_metrics(collectives, {**local, "_stop": 1.0 if self.stop.requested else 0.0}, True)
        stop_now = averaged.pop("_stop") > 0
        epoch_report: dict[str, Any] = {
            "epoch": epoch,
            "local": local,
            "mean": dict(averaged),
            "learning_rate": float(np.asarray(tf.convert_to_tensor(prepared.optimizer.learning_rate))),
        }
        if prepared.validation is not None:
            val_local, val_mean = evaluate(prepared, collectives, prepared.validation, batch, self.eval_step)
            averaged.update({f"val_{name}": value for name, value in val_mean.items()})
            epoch_report.update(val_local=val_local, val_mean=val_mean)
        self.training.diagnostics.epochs.append(epoch_report)
        if self.job.ranks.rank == 0:
            print_line(epoch_line(epoch, averaged))
            if self.writer is not None:
                self.writer.write(epoch, averaged)
        if stop_now:
            raise self.training.stopped(ckpt.Progress(epoch, 0))
        every = self.settings.checkpoint_every_epochs
        if every and (epoch % every == 0 or epoch == self.settings.epochs):
            self.training.checkpoint(ckpt.Progress(epoch, 0))
        return averaged


def _step_error(prepared: Prepared, error: BaseException, where: str) -> UserError:
    """A train step's failure as one sentence: the train channel's reader when its iterator failed,
    otherwise the step (the model) that failed."""
    if raised_by_input(error):
        return read_error(prepared.train.channel, prepared.train.reader, error, where)
    return UserError(f"training failed{where}: {describe_read_error(error)}")


def run(module_path: Path, environ: Mapping[str, str], stop: StopRequest) -> None:
    job = trainer_job(environ)
    settings = settings_from(job.config.hyperparameters, job.paths.hyperparameters)
    batch = settings.per_rank_batch_size(job.ranks.size)
    collectives = make_collectives(job.engine, job.ranks)
    setup, outcomes = _prepare_on_every_rank(job, settings, collectives, module_path, batch)
    TrainingRun(job, settings, collectives, setup, outcomes).run(stop)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1 or arguments[0] in {"-h", "--help"}:
        print(
            "usage: python -m sagetrain.trainer <path/to/model_module.py>\n"
            "Trains the Keras model module's build_model(hp) on the job's channels "
            "(see docs/keras-module.md).",
            file=sys.stderr,
        )
        return 0 if arguments and arguments[0] in {"-h", "--help"} else int(ExitCode.USER_ERROR)
    stop = StopRequest()
    stop.install()
    error_file = Path(os.environ[ERROR_FILE_VAR]) if os.environ.get(ERROR_FILE_VAR) else None
    try:
        run(Path(arguments[0]), os.environ, stop)
    except SagetrainError as error:
        report_failure(str(error), error_file, error)
        return int(error.exit_code)
    except Exception as error:
        report_failure(f"the managed trainer failed: {describe_exception(error)}", error_file, error)
        return int(ExitCode.PLATFORM_ERROR)
    return int(ExitCode.SUCCESS)
