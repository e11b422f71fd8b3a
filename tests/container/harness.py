"""The test harness for public scripts run unmodified (keras_harness/: seeds, the MNIST file, each
worker's weights at exit), as the container tests put it beside a script and read what it wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from cluster import CASES, assert_identical_weights
from keras_harness.harness_names import MNIST_VAR, OUT_VAR, PROBE_VAR

HARNESS = Path(__file__).resolve().parent / "keras_harness"
# Where the harness writes in the container: under /opt/ml/output/data, so SageMaker (and the SDKs'
# local mode, which merges every host's) hands it back.
OUT = "/opt/ml/output/data/harness"
MNIST_IN_CONTAINER = "/opt/ml/input/data/mnist/mnist.npz"


def code_with_harness(tmp_path: Path, case: str) -> Path:
    """A code folder: the case's files, and the harness in its ``harness/`` folder."""
    code = tmp_path / f"code-{case}"
    shutil.copytree(CASES / case, code)
    shutil.copytree(HARNESS, code / "harness")
    return code


def harness_env(
    code_root: str = "/opt/ml/code", *, mnist: bool = False, probe: str | None = None
) -> dict[str, str]:
    """The variables that turn the harness on, for code under ``code_root`` in the container."""
    env = {"PYTHONPATH": f"{code_root}/harness", OUT_VAR: OUT}
    if mnist:
        env[MNIST_VAR] = MNIST_IN_CONTAINER
    if probe is not None:
        env[PROBE_VAR] = probe
    return env


def assert_workers_identical(output_data: Path, workers: int) -> list[Path]:
    """Each TF_CONFIG worker's final weights, in an /opt/ml/output/data (or the SDKs' merged one), are
    there and identical; their files."""
    weights = sorted((output_data / Path(OUT).name).glob("worker-*-weights.npz"))
    assert [path.name for path in weights] == [f"worker-{i}-weights.npz" for i in range(workers)], weights
    assert_identical_weights(weights)
    return weights


def write_mnist_like(folder: Path, rows: int = 4096) -> Path:
    """An MNIST-shaped mnist.npz (uint8 28x28 images, int labels 0-9) that a CNN can learn: each class
    is a bright bar at its own rows, over noise. The real file is not on PyPI, and tests download
    nothing."""
    generator = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)

    def split(count: int) -> tuple[np.ndarray, np.ndarray]:
        labels = generator.integers(0, 10, size=count).astype(np.uint8)
        images = generator.integers(0, 60, size=(count, 28, 28)).astype(np.uint8)
        for index, label in enumerate(labels):
            images[index, 2 + 2 * label : 4 + 2 * label, 4:24] = 255
        return images, labels

    (x_train, y_train), (x_test, y_test) = split(rows), split(rows // 8)
    path = folder / "mnist.npz"
    np.savez_compressed(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def write_mnist_arrays(folder: Path) -> Path:
    """The .npy files amazon-sagemaker-examples' MWMS script reads (flat float32 images, int labels): each
    class is a bright band of its own pixels, over noise."""
    generator = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for split, rows in (("train", 2048), ("eval", 256)):
        labels = generator.integers(0, 10, rows)
        images = generator.uniform(0, 0.2, (rows, 784)).astype(np.float32)
        for index, label in enumerate(labels):
            images[index, 78 * label : 78 * (label + 1)] = 1.0
        np.save(folder / f"{split}_data.npy", images)
        np.save(folder / f"{split}_labels.npy", labels)
    return folder
