"""Figure 4: Horovod allreduce vs raw MPI allreduce (mpi4py) across the job's ranks, same process, same
link. Cases: one 64 MB fp32 tensor; a set of small tensors that Horovod fuses (raw MPI gets the same
fusion by hand: concatenate, one Allreduce, split — the best a user could do with MPI alone).
Rank 0 prints one line per timed call: ``BENCH allreduce case=… impl=… bytes=… seconds=…``.
"""

import json
import os
import time
from collections.abc import Callable
from typing import Any

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf
from mpi4py import MPI  # first: MPI is initialised with MPI_THREAD_MULTIPLE, which Horovod then uses

ITERATIONS = int(json.loads(os.environ.get("SM_HPS", "{}")).get("iterations", 10))
BIG_ELEMENTS = 64 * 1024 * 1024 // 4
SMALL_COUNT, SMALL_ELEMENTS = 128, 16 * 1024  # 128 tensors of 64 KB: 8 MB in all

hvd.init()
world = MPI.COMM_WORLD
rng = np.random.default_rng(hvd.rank())
big = rng.standard_normal(BIG_ELEMENTS, dtype=np.float32)
small = [rng.standard_normal(SMALL_ELEMENTS, dtype=np.float32) for _ in range(SMALL_COUNT)]
big_tf = tf.constant(big)
small_tf = [tf.constant(array) for array in small]


@tf.function
def horovod_big(tensor: tf.Tensor) -> tf.Tensor:
    return hvd.allreduce(tensor, op=hvd.Sum)


@tf.function
def horovod_small(tensors: list[tf.Tensor]) -> list[tf.Tensor]:
    return hvd.grouped_allreduce(tensors, op=hvd.Sum)


def mpi_big() -> np.ndarray:
    result = np.empty_like(big)
    world.Allreduce(big, result, op=MPI.SUM)
    return result


def mpi_small() -> list[np.ndarray]:
    fused = np.concatenate(small)
    result = np.empty_like(fused)
    world.Allreduce(fused, result, op=MPI.SUM)
    return np.split(result, SMALL_COUNT)


def horovod_big_call() -> np.ndarray:
    return horovod_big(big_tf).numpy()


def horovod_small_call() -> list[np.ndarray]:
    return [tensor.numpy() for tensor in horovod_small(small_tf)]


CASES: dict[str, tuple[int, dict[str, Callable[[], Any]]]] = {
    "big": (big.nbytes, {"horovod": horovod_big_call, "mpi4py": mpi_big}),
    "small": (sum(array.nbytes for array in small), {"horovod": horovod_small_call, "mpi4py": mpi_small}),
}

# Correctness first: a benchmark of a wrong sum would be worthless.
expected = world.allreduce(float(big[:4].sum()), op=MPI.SUM)
for name, call in CASES["big"][1].items():
    got = float(call()[:4].sum())
    if abs(got - expected) > 1e-3 * max(1.0, abs(expected)):
        raise SystemExit(f"{name} allreduce is wrong: {got} != {expected}")

for case, (size, calls) in CASES.items():
    for call in calls.values():  # warm-up: tracing, buffers, connections
        call()
        call()
    for iteration in range(ITERATIONS):
        order = list(calls.items()) if iteration % 2 == 0 else list(reversed(calls.items()))
        for impl, call in order:
            world.Barrier()
            began = time.perf_counter()
            call()
            seconds = time.perf_counter() - began
            if hvd.rank() == 0:
                line = f"BENCH allreduce case={case} impl={impl} bytes={size} seconds={seconds:.6f}"
                print(line, flush=True)
print(f"BENCH done rank={hvd.rank()} size={hvd.size()}", flush=True)
