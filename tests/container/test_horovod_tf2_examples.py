"""Horovod's examples/tensorflow2 scripts on Keras 3, unmodified, on 2 ranks (`mpirun -np 2` in one
container): the Keras MNIST example, the GradientTape MNIST example and both synthetic benchmarks
(rewritten under cases/hvd_tf2_examples with the same calls in the same order; Horovod's sdist does not
ship them). They call `optimizer.variables()` and `compile(experimental_run_tf_function=False)`, which
Keras 3 rejects without the image's Keras patches 0004 and 0005. The test harness (keras_harness/)
writes each rank's final weights; both ranks must hold identical trainable weights, which, with a seed
of their own per rank (other initial weights, other batches), shows broadcast and averaging. Batch-norm
moving statistics (the benchmarks' MobileNetV3) stay per rank, as Horovod leaves them upstream."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from cluster import CASES, assert_identical_weights
from conftest import run_in_image
from harness import HARNESS, write_mnist_like
from keras_harness.harness_names import MAX_TAKE_VAR, MNIST_VAR, OUT_VAR

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

SCRIPTS = {
    "keras_mnist": ["keras_mnist.py"],
    "mnist_tape": ["mnist_tape.py"],
    "synthetic_benchmark": [
        "synthetic_benchmark.py", "--model", "MobileNetV3Small", "--batch-size", "4",
        "--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "2", "--no-cuda",
    ],
    "keras_synthetic_benchmark": [
        "keras_synthetic_benchmark.py", "--model", "MobileNetV3Small", "--batch-size", "4",
        "--num-batches-per-iter", "2", "--num-iters", "2", "--no-cuda",
    ],
}  # fmt: skip
HARNESS_ENV = {
    "PYTHONPATH": "/work/harness",
    OUT_VAR: "/work/out",
    MNIST_VAR: "/work/data/mnist.npz",
    # Keras' own switches for running a script briefly without editing it (24 epochs of 250 steps).
    "KERAS_MAX_EPOCHS": "2",
    "KERAS_MAX_STEPS_PER_EPOCH": "5",
    MAX_TAKE_VAR: "12",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_horovod_tensorflow2_example_on_two_ranks(
    tmp_path, cpu_image, docker_client, internal_network, script
):
    work = tmp_path / "work"
    shutil.copytree(CASES / "hvd_tf2_examples", work)
    shutil.copytree(HARNESS, work / "harness")
    write_mnist_like(work / "data", rows=2048)
    (work / "out").mkdir()
    exports = [argument for name in HARNESS_ENV for argument in ("-x", name)]
    command = ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               *exports, "python", *SCRIPTS[script]]  # fmt: skip
    result = run_in_image(
        docker_client,
        cpu_image,
        command,
        timeout_s=600,
        volumes={str(work): {"bind": "/work", "mode": "rw"}},
        environment=HARNESS_ENV,
        entrypoint=["bash", "-c", 'cd /work && exec "$@"', "example"],
        network=internal_network,
    )
    assert result.exit_code == 0, result.output[-5000:]
    weights = sorted((work / "out").glob("rank-*-weights.npz"))
    assert [path.name for path in weights] == ["rank-0-weights.npz", "rank-1-weights.npz"]
    assert_identical_weights(weights)
    with np.load(weights[0]) as loaded:
        count = sum(loaded[name].size for name in loaded.files)
    print(f"{script}: 2 ranks, identical final weights ({count} values)")
    if script == "keras_mnist":
        # Rank 0's ModelCheckpoint wrote one file per (shortened) epoch.
        assert sorted(path.name for path in Path(work).glob("checkpoint-*.h5")) == [
            "checkpoint-1.h5",
            "checkpoint-2.h5",
        ]
