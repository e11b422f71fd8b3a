"""Start tf.distribute worker processes on this host (TF_CONFIG on localhost ports) and read what
each wrote: `<out>/worker<i>.npz` (arrays) and `<out>/worker<i>.json` (a record)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sagetrain.legacy_keras import TF_USE_LEGACY_KERAS_VAR
from sagetrain.plan.tf_config import TF_CONFIG_VAR

WORKERS_DIR = Path(__file__).resolve().parent
# One scenario: TF import plus a few tiny fits per process, on 2 shared cores.
DEADLINE_SECONDS = 600


@dataclass(frozen=True)
class WorkerOutputs:
    arrays: dict[str, np.ndarray]
    record: dict

    def list(self, prefix: str) -> list[np.ndarray]:
        """Arrays saved as `<prefix>/0`, `<prefix>/1`, … in index order."""
        found = {
            int(name.rsplit("/", 1)[1]): value
            for name, value in self.arrays.items()
            if name.rsplit("/", 1)[0] == prefix
        }
        if not found:
            raise AssertionError(f"no arrays under {prefix!r}; have {sorted(self.arrays)[:30]}")
        return [found[index] for index in range(len(found))]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("localhost", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tf_config(ports: list[int], index: int) -> str:
    workers = [f"localhost:{port}" for port in ports]
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(TF_USE_LEGACY_KERAS_VAR, None)
    env.update(
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join(filter(None, [str(WORKERS_DIR), env.get("PYTHONPATH")])),
    )
    return env


def run_workers(program: str, workers: int, out_dir: Path, *args: str) -> list[WorkerOutputs]:
    """Run `program` (a file in keras_workers/) as `workers` MultiWorkerMirroredStrategy workers
    (workers=0: one process, no TF_CONFIG) and return what each wrote."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ports = free_ports(workers)
    processes = []
    for index in range(max(workers, 1)):
        env = base_env()
        if workers:
            env[TF_CONFIG_VAR] = tf_config(ports, index)
        # Each worker its own temporary folder, as on its own host: what it leaves there is its own.
        env["TMPDIR"] = str(out_dir / f"tmp{index}")
        Path(env["TMPDIR"]).mkdir(exist_ok=True)
        log = (out_dir / f"worker{index}.log").open("w")
        command = [sys.executable, str(WORKERS_DIR / program), str(out_dir), *args]
        processes.append(
            (subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=out_dir), log)
        )
    failures = []
    for index, (process, log) in enumerate(processes):
        try:
            code = process.wait(timeout=DEADLINE_SECONDS)
        except subprocess.TimeoutExpired:
            for other, _ in processes:
                other.kill()
            code = "killed at the deadline"
        log.close()
        if code != 0:
            tail = (out_dir / f"worker{index}.log").read_text(errors="replace")[-5000:]
            failures.append(f"worker {index} of {program} {args}: exit {code}\n{tail}")
    if failures:
        raise AssertionError("\n\n".join(failures))
    return [read_worker(out_dir, index) for index in range(max(workers, 1))]


def read_worker(out_dir: Path, index: int) -> WorkerOutputs:
    with np.load(out_dir / f"worker{index}.npz") as arrays:
        loaded = {name: arrays[name] for name in arrays.files}
    return WorkerOutputs(loaded, json.loads((out_dir / f"worker{index}.json").read_text()))


def max_abs_difference(left: list[np.ndarray], right: list[np.ndarray]) -> float:
    assert len(left) == len(right), (len(left), len(right))
    return max(
        float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
        for a, b in zip(left, right, strict=True)
    )


def assert_identical(outputs: list[WorkerOutputs], prefix: str) -> None:
    reference = outputs[0].list(prefix)
    for index, worker in enumerate(outputs[1:], start=1):
        mine = worker.list(prefix)
        assert len(mine) == len(reference), f"{prefix}: worker {index} has {len(mine)} arrays"
        for position, (a, b) in enumerate(zip(mine, reference, strict=True)):
            assert np.array_equal(a, b), (
                f"{prefix}/{position} differs between worker {index} and worker 0 "
                f"(max abs difference {max_abs_difference([a], [b]):g})"
            )
