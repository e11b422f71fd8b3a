"""Figures 13 and 14, the managed trainer's input path without training: one process per rank slot, as
the plain readers run, each preparing its rank's share exactly as the trainer does (sagetrain.trainer's
own functions: list, deal, count, parse, the epoch's seeded shuffle when the job sets a shuffle buffer
(the figures do not, as the plain read does not shuffle), exact batches, prefetch, one repeated pipeline
and iterator for epochs that are the same) and reading it without a model step or a collective. Each
epoch takes its steps' batches from the epoch's iterator, as the trainer's step does.

``python input_path_read.py NAME PASSES``, with the rank's place in SAGETRAIN_RANK/_LOCAL_RANK/_SIZE/
_LOCAL_SIZE (channel_job.py sets them). Prints ``BENCH first_batch impl=input reader=NAME …`` (the
model module's probe, when preparation feeds the first batch through the model), then, after a first
epoch that warms up as the trainer's does and once every reader has (start_together.py),
``BENCH read impl=input reader=NAME records=… seconds=…`` per timed epoch.
"""

import sys
import time
from pathlib import Path

from sagetrain.trainer.readers import EpochBatches
from start_together import reader_waits
from trainer_input import trainer_input

name, passes = sys.argv[1], int(sys.argv[2])
trainer = trainer_input(Path(__file__).with_name("channel_model.py"))


def read_epoch(batches: EpochBatches, epoch: int) -> int:
    records = 0
    iterator = batches.iterator(epoch)
    for _ in range(batches.steps):
        _images, labels = next(iterator)
        records += int(labels.shape[0])
    return records


read_epoch(trainer.epochs_up_to(1), 1)
reader_waits("input", name)
# Made after the wait, as the plain readers start each timed pass: made before it, the repeated
# pipeline would read the first timed epoch's batches while waiting.
timed = trainer.epochs_up_to(passes)
for epoch in range(1, passes + 1):
    began = time.perf_counter()
    records = read_epoch(timed, epoch)
    seconds = time.perf_counter() - began
    print(f"BENCH read impl=input reader={name} records={records} seconds={seconds:.6f}", flush=True)
