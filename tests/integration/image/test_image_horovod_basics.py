"""Horovod as built into the image, with real OpenMPI/Gloo and TensorFlow: collectives give the right
numbers, and a Keras 3 model trained with tf.GradientTape and manually allreduced gradients ends with
identical weights on both ranks, equal to one process training on both ranks' data."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WORKERS = Path(__file__).with_name("basics_workers.py")
RUN_DEADLINE_S = 300
RANKS = 2


def launch(controller: str, program: str, out_dir: Path) -> None:
    worker = [sys.executable, str(WORKERS), program, str(out_dir)]
    if controller == "mpi":
        command = ["mpirun", "-np", str(RANKS), "--oversubscribe", "--bind-to", "none", *worker]
    else:
        command = ["horovodrun", "--gloo", "-np", str(RANKS), "-H", f"localhost:{RANKS}", *worker]
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_DEADLINE_S, check=False, cwd=out_dir
    )
    assert completed.returncode == 0, (
        f"{command} exited {completed.returncode}:\n{completed.stdout}\n{completed.stderr}"
    )


@pytest.mark.parametrize("controller", ["mpi", "gloo"])
def test_allreduce_sums_and_averages_across_two_ranks(tmp_path, controller):
    launch(controller, "allreduce", tmp_path)
    results = sorted(
        (json.loads((tmp_path / f"allreduce-{rank}.json").read_text()) for rank in range(RANKS)),
        key=lambda result: result["rank"],
    )
    assert [result["rank"] for result in results] == [0, 1]
    for result in results:
        assert result["size"] == RANKS
        assert result["sum"] == [3.0] * 4  # 1 + 2
        assert result["average"] == [1.5] * 4
        assert result["allgather"] == [0, 1]
        assert result["mpi_enabled"] is (controller == "mpi")
        assert result["gloo_enabled"] is (controller == "gloo")


def test_keras3_gradient_tape_with_allreduced_gradients_keeps_ranks_identical(tmp_path):
    launch("mpi", "keras_tape", tmp_path)
    subprocess.run(
        [sys.executable, str(WORKERS), "keras_tape_reference", str(tmp_path)],
        check=True,
        timeout=RUN_DEADLINE_S,
        capture_output=True,
    )
    ranks = [np.load(tmp_path / f"keras_tape-{rank}.npz") for rank in range(RANKS)]
    reference = np.load(tmp_path / "keras_tape-reference.npz")
    weight_names = sorted(name for name in reference.files if name.startswith("w"))
    assert len(weight_names) == 4  # two Dense layers: kernel and bias each

    # Different seeds per rank: rank 1's weights were really replaced by rank 0's broadcast.
    assert bool(ranks[1]["changed_by_broadcast"]) is True
    assert ranks[0]["initial_sum"] == ranks[1]["initial_sum"]
    # Different data per rank: the local losses differ, so equal weights come from shared gradients.
    assert not np.allclose(ranks[0]["losses"], ranks[1]["losses"])
    for name in weight_names:
        assert np.array_equal(ranks[0][name], ranks[1][name]), f"{name} differs between ranks"
        np.testing.assert_allclose(ranks[0][name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert ranks[0]["losses"][-1] < ranks[0]["losses"][0]
