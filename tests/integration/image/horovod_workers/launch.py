"""Start a worker program on N Horovod ranks with real OpenMPI and collect what each rank wrote."""

from __future__ import annotations

import enum
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sagetrain.legacy_keras import TF_USE_LEGACY_KERAS_VAR

WORKERS_DIR = Path(__file__).resolve().parent
# Upper bound for one mpirun job: TF import plus a few tiny fits on 2 shared CPU cores.
JOB_DEADLINE_SECONDS = 600


class KerasFlavour(enum.Enum):
    """Which Keras `tf.keras` resolves to in the ranks."""

    KERAS3 = "keras3"
    TF_KERAS = "tf_keras"


@dataclass(frozen=True)
class RankOutputs:
    """What one rank wrote: arrays (np.savez) and a JSON document."""

    arrays: dict[str, np.ndarray]
    record: dict


def rank_env(flavour: KerasFlavour) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(TF_USE_LEGACY_KERAS_VAR, None)
    if flavour is KerasFlavour.TF_KERAS:
        env[TF_USE_LEGACY_KERAS_VAR] = "1"
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join(filter(None, [str(WORKERS_DIR), env.get("PYTHONPATH")])),
    )
    return env


def mpirun_command(ranks: int, program: list[str]) -> list[str]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun is not on PATH; these tests need OpenMPI (as installed in the image).")
    # --oversubscribe: 3 ranks on a 2-core machine; --bind-to none: let ranks share cores freely.
    return [mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", *program]


def run_ranks(
    worker: str, ranks: int, flavour: KerasFlavour, out_dir: Path, *args: str, cwd: Path | None = None
) -> list[RankOutputs]:
    """Run `worker` (a file in horovod_workers/) on `ranks` ranks; return each rank's outputs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    program = [sys.executable, str(WORKERS_DIR / worker), str(out_dir), *args]
    command = mpirun_command(ranks, program)
    try:
        done = subprocess.run(
            command,
            env=rank_env(flavour),
            cwd=cwd or out_dir,
            capture_output=True,
            text=True,
            timeout=JOB_DEADLINE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise AssertionError(
            f"{worker} on {ranks} ranks ({flavour.value}) did not finish within {JOB_DEADLINE_SECONDS} s; "
            f"last output:\n{(error.stdout or '')[-3000:]}\n{(error.stderr or '')[-3000:]}"
        ) from error
    if done.returncode != 0:
        raise AssertionError(
            f"{worker} on {ranks} ranks ({flavour.value}) exited {done.returncode}; command {command}\n"
            f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-6000:]}"
        )
    return [read_rank(out_dir, rank) for rank in range(ranks)]


def read_rank(out_dir: Path, rank: int) -> RankOutputs:
    with np.load(out_dir / f"rank{rank}.npz") as arrays:
        loaded = {name: arrays[name] for name in arrays.files}
    record = json.loads((out_dir / f"rank{rank}.json").read_text())
    return RankOutputs(arrays=loaded, record=record)


def arrays_with_prefix(outputs: RankOutputs, prefix: str) -> list[np.ndarray]:
    """The arrays saved as `<prefix>/0`, `<prefix>/1`, … in index order."""
    indexed = {
        int(name[len(prefix) + 1 :]): array
        for name, array in outputs.arrays.items()
        if name.startswith(prefix + "/") and name[len(prefix) + 1 :].isdigit()
    }
    if not indexed:
        raise AssertionError(f"no arrays saved under {prefix!r}; have {sorted(outputs.arrays)[:20]}")
    return [indexed[i] for i in range(len(indexed))]


def assert_bit_identical_across_ranks(outputs: list[RankOutputs], prefix: str) -> None:
    reference = arrays_with_prefix(outputs[0], prefix)
    for rank, rank_outputs in enumerate(outputs[1:], start=1):
        arrays = arrays_with_prefix(rank_outputs, prefix)
        assert len(arrays) == len(reference), (
            f"{prefix}: rank {rank} saved {len(arrays)} arrays, rank 0 {len(reference)}"
        )
        for index, (mine, root) in enumerate(zip(arrays, reference, strict=True)):
            assert mine.shape == root.shape, (
                f"{prefix}/{index}: shape {mine.shape} on rank {rank}, {root.shape} on 0"
            )
            assert np.array_equal(mine, root), (
                f"{prefix}/{index} differs between rank {rank} and rank 0 (max |diff| "
                f"{np.max(np.abs(mine.astype(np.float64) - root.astype(np.float64)))})"
            )


def max_abs_difference(left: list[np.ndarray], right: list[np.ndarray]) -> float:
    return max(
        float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        for a, b in zip(left, right, strict=True)
    )
