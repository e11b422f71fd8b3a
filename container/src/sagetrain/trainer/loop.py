"""The training loop: a traced step with explicit gradient averaging (weighted by each rank's batch
length), equal steps on every rank, metric averaging, the SIGTERM agreement, checkpoints, evaluation.

Why not ``model.fit``: with Keras 3, Horovod's DistributedOptimizer under ``fit`` does not average
gradients, and ``fit`` under MultiWorkerMirroredStrategy works only with this image's Keras patches; an
explicit step is correct on Keras 3 and tf-keras alike, under either engine's collectives, weights
records across uneven shards, and lets every rank agree to stop at the same step.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from sagetrain.errors import UserError
from sagetrain.trainer.collectives import Collectives
from sagetrain.trainer.hyperparameters import LrScaling, TrainerSettings
from sagetrain.trainer.preparation import Prepared
from sagetrain.trainer.readers import RankRecords, evaluation_batches, read_batches


def model_variables(prepared: Prepared) -> list[Any]:
    return list(prepared.model.variables)


def optimizer_variables(prepared: Prepared) -> list[Any]:
    variables = prepared.optimizer.variables
    # A method in tf-keras' optimizers, a property in Keras 3's.
    return list(variables() if callable(variables) else variables)


def values_of(variables: Iterable[Any]) -> list[np.ndarray]:
    return [np.asarray(tf.convert_to_tensor(variable)) for variable in variables]


def _batch_length(x: Any) -> tf.Tensor:
    return tf.cast(tf.shape(tf.nest.flatten(x)[0])[0], tf.float32)


def make_train_step(prepared: Prepared, collectives: Collectives) -> Callable[[Any, tf.Tensor], tf.Tensor]:
    """``train_step(iterator, stop_flag)``: one step on the iterator's next batch; returns the number of
    ranks that asked to stop. The batch is taken inside the traced function, as Keras' fit does, so no
    tensor crosses into Python per step."""
    model, optimizer, loss_tracker = prepared.model, prepared.optimizer, prepared.loss_tracker
    trainable = list(model.trainable_variables)

    @tf.function
    def train_step(iterator: Any, stop_flag: tf.Tensor) -> tf.Tensor:
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred)
            # Keras 3's LossScaleOptimizer (mixed precision) scales here and unscales in apply_gradients.
            scaled = optimizer.scale_loss(loss) if hasattr(optimizer, "scale_loss") else loss
        gradients = tape.gradient(scaled, trainable)
        records = _batch_length(x)
        # Variables the loss does not reach have no gradient on any rank (same graph everywhere).
        connected = [index for index, gradient in enumerate(gradients) if gradient is not None]
        # The stop flag travels with the gradients, so stopping costs no extra round trip: any rank's
        # SIGTERM stops all.
        averaged, stop_requests = collectives.reduce_step(
            [tf.convert_to_tensor(gradients[index]) for index in connected], records, stop_flag
        )
        optimizer.apply_gradients(zip(averaged, [trainable[index] for index in connected], strict=True))
        loss_tracker.update_state(loss, sample_weight=records)
        model.compute_metrics(x, y, y_pred, None)
        return stop_requests

    return train_step


def make_eval_step(prepared: Prepared) -> Callable[[Any, Any], None]:
    model, loss_tracker = prepared.model, prepared.loss_tracker

    @tf.function(reduce_retracing=True)
    def eval_step(x: Any, y: Any) -> None:
        y_pred = model(x, training=False)
        loss = model.compute_loss(x=x, y=y, y_pred=y_pred)
        loss_tracker.update_state(loss, sample_weight=_batch_length(x))
        model.compute_metrics(x, y, y_pred, None)

    return eval_step


def reset_metrics(prepared: Prepared) -> None:
    prepared.model.reset_metrics()
    prepared.loss_tracker.reset_state()


def local_metrics(prepared: Prepared) -> dict[str, float]:
    """This rank's metrics: our loss tracker (weighted by records), then the model's compiled metrics."""
    results: dict[str, float] = {"loss": float(prepared.loss_tracker.result())}
    for name, value in prepared.model.get_metrics_result().items():
        if name != "loss":
            results[name] = float(np.asarray(value))
    return results


def mean_metrics(
    collectives: Collectives, metrics: Mapping[str, float], has_records: bool
) -> dict[str, float]:
    """The plain mean over the ranks that had records (all of them, for training)."""
    names = list(metrics)
    weight = 1.0 if has_records else 0.0
    vector = np.array([metrics[name] * weight for name in names] + [weight], dtype=np.float64)
    summed = collectives.mean_over_ranks(vector) * collectives.ranks.size
    count = summed[-1]
    return {name: float(summed[index] / count) if count else float("nan") for index, name in enumerate(names)}


def evaluate(
    prepared: Prepared,
    collectives: Collectives,
    records: RankRecords,
    batch_size: int,
    eval_step: Callable[[Any, Any], None],
) -> tuple[dict[str, float], dict[str, float]]:
    """(local, cross-rank mean) metrics of one evaluation channel; no collective per batch, so ranks with
    different numbers of batches never wait for each other."""
    reset_metrics(prepared)
    for x, y in read_batches(records, evaluation_batches(records, batch_size)):
        eval_step(x, y)
    local = local_metrics(prepared)
    reset_metrics(prepared)
    return local, mean_metrics(collectives, local, records.count > 0)


@dataclass
class LearningRatePlan:
    """Linear scaling by the number of ranks, then a linear warmup from ~0 over ``warmup_steps``."""

    target: float | None
    warmup_steps: int

    def at(self, global_step: int) -> float | None:
        if self.target is None:
            return None
        if self.warmup_steps <= 0:
            return self.target
        return self.target * min(1.0, (global_step + 1) / self.warmup_steps)


def learning_rate_plan(
    prepared: Prepared, settings: TrainerSettings, ranks: int, steps_per_epoch: int
) -> LearningRatePlan:
    if settings.lr_scaling is LrScaling.NONE and settings.warmup_epochs == 0:
        return LearningRatePlan(None, 0)
    # get_config() gives a number (tf-keras: a numpy float32) for a constant rate and a serialized dict
    # for a schedule, in both Kerases.
    configured = prepared.optimizer.get_config().get("learning_rate")
    if isinstance(configured, bool) or not isinstance(configured, numbers.Real):
        raise UserError(
            "hyperparameters lr_scaling/warmup_epochs need a constant learning rate, but the optimizer of "
            "build_model uses a schedule; drop those hyperparameters or the schedule."
        )
    base = float(configured)
    target = base * ranks if settings.lr_scaling is LrScaling.LINEAR else base
    return LearningRatePlan(target, round(settings.warmup_epochs * steps_per_epoch))


def set_learning_rate(prepared: Prepared, value: float | None) -> None:
    if value is not None:
        prepared.optimizer.learning_rate = value
