"""The lab's step-results timing (``benchmarks/run.py lab mwms-variants --step-results``): what averaging
a step's results across MultiWorkerMirroredStrategy workers costs on its own, the image's Keras (its
patch 0002: one collective per dtype for all of them) against one collective per value (the image's
Keras before; payload/step_reductions.py). The values are those of figure 9's `fit` step by default
(the loss and one metric), float32 scalars that differ by worker.

Hyperparameters: ``values`` (how many results, default 2), ``calls`` per timed block (default 200),
``blocks`` per way (default 10, the ways alternating which goes first). The chief prints ``BENCH
step_results way=… values=… ms=…`` (milliseconds per call) per block, after ``BENCH step_results_check
agree=0|1 first_results=…`` (each way's first results, as JSON without spaces).
"""

import json
import os
import time
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from keras.src.backend.tensorflow.trainer import reduce_per_replica
from step_reductions import one_collective_per_value

hp = json.loads(os.environ["SM_HPS"])
value_count, calls, blocks = int(hp.get("values", 2)), int(hp.get("calls", 200)), int(hp.get("blocks", 10))
strategy = tf.distribute.MultiWorkerMirroredStrategy()
chief = strategy.cluster_resolver.task_id == 0


def step_results() -> dict[str, tf.Tensor]:
    replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
    return {f"result_{index}": replica + float(index) for index in range(value_count)}


WAYS: dict[str, Callable[[], Any]] = {
    "image": tf.function(lambda: reduce_per_replica(strategy.run(step_results), strategy, "auto")),
    "per-value": tf.function(lambda: one_collective_per_value(strategy.run(step_results), strategy)),
}
# Traced, and each collective's first run (its group's set-up) done, before any timing.
first_results = {
    way: {name: float(value) for name, value in reduce().items()} for way, reduce in WAYS.items()
}
if chief:
    agree = int(len({json.dumps(results, sort_keys=True) for results in first_results.values()}) == 1)
    compact = json.dumps(first_results, sort_keys=True, separators=(",", ":"))
    print(f"BENCH step_results_check agree={agree} first_results={compact}", flush=True)
for block in range(blocks):
    for way in list(WAYS) if block % 2 == 0 else list(reversed(WAYS)):
        reduce = WAYS[way]
        began = time.perf_counter()
        for _ in range(calls):
            reduce()
        milliseconds = (time.perf_counter() - began) * 1000 / calls
        if chief:
            print(f"BENCH step_results way={way} values={value_count} ms={milliseconds:.4f}", flush=True)
