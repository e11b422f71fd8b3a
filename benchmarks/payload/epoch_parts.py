"""Where one of the managed trainer's epochs goes on every rank (benchmarks/lab/epoch_parts.py runs it):
its start (the metrics reset, the epoch's iterator: made for the first epoch, then continued, as the
trainer's unshuffled epochs are one repeated pipeline), its steps (each takes its batch inside the
traced step, then the engine's one collective), the epoch's metrics averaged over the ranks; then, in
the same process, as many epochs read with no step at all, back to back through one iterator after one
collective that starts every rank together. Figures 13 and 14's model (channel_model.py) and
batches, no shuffle, so every epoch is the same batches. The learning rate stays the module's (the
figure sets no plan, so the trainer sets none per step either). Script mode: run by ``train``.

Prints ``BENCH epoch_parts rank=R steps=S start_ms=… steps_ms=… metrics_ms=… epoch_ms=…
read_alone_ms=… slowest_epoch_ms=…``: medians over the timed epochs; the read alone, their mean; and the
slowest timed epoch.
"""

import os
import statistics
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
from sagetrain.trainer.collectives import make_collectives
from sagetrain.trainer.job import trainer_job
from sagetrain.trainer.loop import local_metrics, make_train_step, mean_metrics, reset_metrics
from trainer_input import trainer_input

UNTIMED_EPOCHS = 1  # it traces the step; figures 13 and 14 time the epochs after it too
TIMED_EPOCHS = 10

job = trainer_job(os.environ)
# Before any other TensorFlow op, as the trainer makes them (the engine may configure TensorFlow's runtime).
collectives = make_collectives(job.engine, job.ranks)
collectives.connect()  # before preparing: this payload times no preparation
rank = job.ranks.rank
trainer = trainer_input(Path(__file__).with_name("channel_model.py"), job, collectives.allgather_object)
prepared, steps, epochs_up_to = trainer.prepared, trainer.steps, trainer.epochs_up_to
batches = epochs_up_to(UNTIMED_EPOCHS + TIMED_EPOCHS)
train_step = make_train_step(prepared, collectives)
keep_going = tf.constant(0.0)
parts: dict[str, list[float]] = {"start": [], "steps": [], "metrics": [], "epoch": [], "read_alone": []}

for epoch in range(1, UNTIMED_EPOCHS + TIMED_EPOCHS + 1):
    began = time.perf_counter()
    reset_metrics(prepared)
    iterator = batches.iterator(epoch)
    made = time.perf_counter()
    for _ in range(steps):
        float(train_step(iterator, keep_going))
    stepped = time.perf_counter()
    mean_metrics(collectives, {**local_metrics(prepared), "_stop": 0.0}, True)
    ended = time.perf_counter()
    if epoch > UNTIMED_EPOCHS:
        parts["start"].append(made - began)
        parts["steps"].append(stepped - made)
        parts["metrics"].append(ended - stepped)
        parts["epoch"].append(ended - began)

# Read back to back through one iterator, as the unshuffled epochs are: a pause between epochs would let
# the prefetch read the next one untimed. So one time for all, each epoch its share.
alone = epochs_up_to(TIMED_EPOCHS)
collectives.mean_over_ranks(np.zeros(1))  # every rank starts reading together
began = time.perf_counter()
for epoch in range(1, TIMED_EPOCHS + 1):
    iterator = alone.iterator(epoch)
    for _ in range(steps):
        next(iterator)
parts["read_alone"].append((time.perf_counter() - began) / TIMED_EPOCHS)

medians = " ".join(f"{name}_ms={1000 * statistics.median(values):.1f}" for name, values in parts.items())
# Lockstep epochs on oversubscribed cores vary several-fold from one epoch to the next: the median hides it.
slowest = f"slowest_epoch_ms={1000 * max(parts['epoch']):.1f}"
print(f"BENCH epoch_parts rank={rank} steps={steps} {medians} {slowest}", flush=True)
