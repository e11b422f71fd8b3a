"""Keras 3 `fit` under MultiWorkerMirroredStrategy on 2 and 3 simulated hosts, through the image's
TF_CONFIG engine: the common recipe, TensorFlow's multi-worker Keras tutorial and the AWS toolkit's
MWMS test script (both rewritten under cases/, same calls in the same order), each run unmodified
with the test harness in keras_harness/ on PYTHONPATH (seeds, the MNIST file, weights at exit).

Every worker must end with bit-identical weights, equal within float tolerance to the same script run
as one process on the same global batch (the harness's reference mode, in one container)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from cluster import (
    CASES,
    DOCKER,
    TENSORFLOW_STARTUP,
    assert_identical_weights,
    files_by_host,
    run_cluster,
    run_workdir,
    start_cluster,
    write_regression_csv,
)
from conftest import run_in_image
from harness import OUT as HARNESS_OUT
from harness import code_with_harness, harness_env, write_mnist_arrays, write_mnist_like
from keras_harness.harness_names import REFERENCE_VAR
from tensorboard_events import event_files, event_tags

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

MWMS = {"sagemaker_multi_worker_mirrored_strategy_enabled": True}
# Max abs difference allowed between a worker's weights and the one-process reference: float32 sums
# of the same gradients in another order, over a few hundred steps.
REFERENCE_ATOL = 1e-4
STARTUP_OR_SHUTDOWN_NOISE = rf"{TENSORFLOW_STARTUP.pattern}|BaseCollectiveExecutor::StartAbort"


def reference_weights(docker_client, image: str, code: Path, program: str, workers: int, data: Path):
    """The script as one process on its global batch (the harness swaps the strategy out)."""
    out = code.parent / f"reference-{code.name}-{workers}"
    out.mkdir()
    data_target = "/opt/ml/input/data/mnist" if (data / "mnist.npz").exists() else "/opt/ml/input/data/train"
    tf_config = {"cluster": {"worker": [f"algo-{i + 1}:2222" for i in range(workers)]}, "task": {}}
    tf_config["task"] = {"type": "worker", "index": 0}
    result = run_in_image(
        docker_client,
        image,
        ["python", f"/opt/ml/code/{program}"],
        timeout_s=600,
        volumes={
            str(code): {"bind": "/opt/ml/code", "mode": "ro"},
            str(data): {"bind": data_target, "mode": "ro"},
            str(out): {"bind": HARNESS_OUT, "mode": "rw"},
        },
        environment={
            **harness_env(mnist=data_target.endswith("mnist")),
            REFERENCE_VAR: "1",
            "TF_CONFIG": json.dumps(tf_config),
            "SM_CHANNEL_TRAIN": "/opt/ml/input/data/train",
            "SM_MODEL_DIR": "/tmp",
        },
        entrypoint=["bash", "-c", 'cd /opt/ml/code && exec "$@"', "reference"],
    )
    assert result.exit_code == 0, result.output[-4000:]
    with np.load(out / "reference-weights.npz") as loaded:
        return [loaded[name] for name in loaded.files]


def run_recipe(tmp_path, image, docker_client, case: str, program: str, hosts: int, data: Path):
    code = code_with_harness(tmp_path, case)
    mnist = (data / "mnist.npz").exists()
    result = run_cluster(
        tmp_path, image, hosts, code, name=f"{case}-{hosts}", program=program, hyperparameters=MWMS,
        channels={"mnist" if mnist else "train": data}, env=harness_env(mnist=mnist), extra=["--grace", "60"],
        timeout=600,
    )  # fmt: skip
    assert result.exit_code == 0, result.describe()
    assert set(result.exit_codes().values()) == {0}, result.describe()
    # A log a person can read: neither TensorFlow's start-up lines on every worker nor, after a success,
    # the collectives' record of a peer that exited first.
    noise = [line for line in result.lines if re.search(STARTUP_OR_SHUTDOWN_NOISE, line)]
    assert noise == [], noise
    weights = files_by_host(result, "harness/worker-*-weights.npz")
    assert {host: [path.name for path in paths] for host, paths in weights.items()} == {
        f"algo-{i + 1}": [f"worker-{i}-weights.npz"] for i in range(hosts)
    }, result.describe()
    assert_identical_weights([paths[0] for paths in weights.values()])
    with np.load(weights["algo-1"][0]) as loaded:
        trained = [loaded[name] for name in loaded.files]
    reference = reference_weights(docker_client, image, code, program, hosts, data)
    difference = max(float(np.max(np.abs(a - b))) for a, b in zip(trained, reference, strict=True))
    print(f"{case} on {hosts} hosts: identical weights on every worker; max abs difference to one "
          f"process on the global batch {difference:.3g}")  # fmt: skip
    for got, want in zip(trained, reference, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=REFERENCE_ATOL)
    return result


@pytest.mark.parametrize("hosts", [2, 3])
def test_the_common_keras3_recipe(tmp_path, cpu_image, docker_client, hosts):
    data = write_regression_csv(tmp_path / "train", rows=480)
    result = run_recipe(tmp_path, cpu_image, docker_client, "mwms_keras3_fit", "train.py", hosts, data)
    # The TensorBoard callback: the chief's folder holds the logs, the other workers' none.
    train = event_tags(result.tree("algo-1") / "output" / "tensorboard")["train"]
    assert train["epoch_loss"] == train["epoch_mae"] == [0, 1, 2], train
    assert "keras" in train and any(tag.endswith("/histogram") for tag in train), train
    for host in result.hosts[1:]:
        assert event_files(result.tree(host) / "output" / "tensorboard") == [], host


def test_the_tensorflow_multi_worker_keras_tutorial(tmp_path, cpu_image, docker_client):
    data = write_mnist_like(tmp_path / "mnist").parent
    result = run_recipe(tmp_path, cpu_image, docker_client, "mwms_tf_tutorial", "main.py", 2, data)
    # The tutorial's saving section: the chief's model in the model folder, no temporary folder left.
    assert sorted(path.name for path in (result.output / "model").iterdir()) == ["keras-model.keras"]
    assert not list((result.tree("algo-2") / "model").glob("workertemp_*"))


SERVE_SCRIPT = """
import numpy as np, tensorflow as tf
serving = tf.saved_model.load("/model/000000001").signatures["serving_default"]
outputs = serving(tf.constant(np.load("/data/eval_data.npy")))
(predictions,) = outputs.values()
np.save("/out/served.npy", predictions.numpy())
"""


def test_the_sagemaker_examples_mwms_script_saves_a_saved_model_serving_its_predictions(
    tmp_path, cpu_image, docker_client
):
    """Keras 2's SavedModel idiom on Keras 3 (container/keras/patches 0006): the chief's
    `model.save(<model_dir>/000000001)` is a SavedModel whose serving signature predicts what the trained
    model predicts."""
    data = write_mnist_arrays(tmp_path / "training")
    code = code_with_harness(tmp_path, "mwms_sagemaker_example")
    probe = "/opt/ml/input/data/training/eval_data.npy"
    result = run_cluster(
        tmp_path, cpu_image, 2, code, name="mwms-sm-example", program="mnist-distributed.py",
        hyperparameters=MWMS, channels={"training": data}, env=harness_env(probe=probe), timeout=600,
    )  # fmt: skip
    assert result.exit_code == 0, result.describe()
    assert "writes a TensorFlow SavedModel folder" in result.log(), result.describe()
    weights = files_by_host(result, "harness/worker-*-weights.npz")
    assert_identical_weights([paths[0] for paths in weights.values()])
    model = result.output / "model"
    assert sorted(path.name for path in model.iterdir()) == ["000000001"]
    assert (model / "000000001" / "saved_model.pb").is_file()
    served = tmp_path / "served"
    served.mkdir()
    run = run_in_image(
        docker_client, cpu_image, ["python", "-c", SERVE_SCRIPT], timeout_s=300,
        volumes={str(model): {"bind": "/model", "mode": "ro"}, str(data): {"bind": "/data", "mode": "ro"},
                 str(served): {"bind": "/out", "mode": "rw"}},
    )  # fmt: skip
    assert run.exit_code == 0, run.output[-3000:]
    (trained,) = files_by_host(result, "harness/worker-0-predictions.npy")["algo-1"]
    np.testing.assert_allclose(np.load(served / "served.npy"), np.load(trained), rtol=1e-5, atol=1e-6)


def test_the_aws_toolkit_mwms_script(tmp_path, cpu_image, docker_client):
    data = write_mnist_like(tmp_path / "mnist").parent
    run_recipe(tmp_path, cpu_image, docker_client, "mwms_aws_toolkit", "train_dummy.py", 2, data)


EPOCH_DONE = re.compile(r"^epoch=(\d+)$")
EPOCH_BEGUN = re.compile(r"^begin epoch=(\d+)$")


def epochs_in(result, pattern: re.Pattern, host: str = "algo-1") -> list[int]:
    """The epochs ``host``'s program said it began or ended, from its own lines (rank tag left out)."""
    return [int(match.group(1)) for line in result.host_lines(host) if (match := pattern.search(line))]


def test_sigterm_mid_fit_then_a_restart_resumes_from_the_backup_without_losing_an_epoch(tmp_path, cpu_image):
    """Every host gets SIGTERM (a stopped job, a spot interruption) during epoch 3 or later; the same
    trees run again with the checkpoint folder restored (shared here, as SageMaker restores it to every
    host): training continues after the last backed-up epoch, on every worker alike."""
    data = write_regression_csv(tmp_path / "train", rows=256)
    checkpoints = tmp_path / "checkpoints"
    run_flags = ["--grace", "60", "--checkpoints", str(checkpoints)]
    with start_cluster(
        tmp_path, cpu_image, 2, CASES / "mwms_backup", name="mwms-sigterm", program="train.py",
        hyperparameters=MWMS, channels={"train": data}, extra=run_flags, timeout=540,
    ) as running:  # fmt: skip
        running.wait_for_line(r"^epoch=2$", timeout=400, host="algo-1")
        DOCKER.run(["kill", "--signal", "TERM", running.container("algo-1"), running.container("algo-2")])
        stopped = running.wait()
    assert stopped.exit_code != 0, stopped.describe()
    completed = epochs_in(stopped, EPOCH_DONE)
    assert completed and 2 <= completed[-1] < 6, stopped.describe()
    assert (checkpoints / "backup" / "latest.weights.h5").is_file()

    resumed = run_workdir(
        tmp_path, cpu_image, stopped.workdir, name="mwms-resume", timeout=540, extra=run_flags
    )
    assert resumed.exit_code == 0, resumed.describe()
    begun = epochs_in(resumed, EPOCH_BEGUN)
    print(f"the stopped run completed epochs {completed}; the restart ran epochs {begun}")
    # It starts right after the last backed-up epoch: the last one the stopped run reported, or the one
    # after it when SIGTERM came between writing a backup and printing its line.
    assert begun and completed[-1] + 1 <= begun[0] <= completed[-1] + 2, (completed, begun)
    assert begun == list(range(begun[0], 7)), begun
    assert epochs_in(resumed, EPOCH_BEGUN, host="algo-2") == begun
    weights = files_by_host(resumed, "worker-*-weights.npz")
    assert_identical_weights([paths[0] for paths in weights.values()])
