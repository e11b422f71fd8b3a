"""What a user reads when a job ends, on the real image: the program's own error first in SageMaker's
FailureReason (the failure file's first 1,024 characters), no TensorFlow start-up lines, a near miss of
the model-module contract and an empty model folder named; and SageMaker's conventions a derived image or
a job's configuration uses: SAGEMAKER_PROGRAM in the image's environment, sagemaker_container_log_level,
checkpointconfig.json's LocalPath."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from cluster import DOCKER, TENSORFLOW_STARTUP
from conftest import TEST_LABEL, RunResult, run_in_image
from sagetrain.config.channels import Channel
from sagetrain.config.job_files import JobFiles

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

JOB_DEADLINE_S = 300
FAILURE_REASON_CHARS = 1024  # what SageMaker shows of /opt/ml/output/failure

# A Keras shape error, as a user makes it: the model takes 4 features, the data has 3.
SHAPE_ERROR_SCRIPT = """
import numpy as np
import keras
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy")
model.fit(np.zeros((8, 3), "float32"), np.zeros((8,), "int32"), epochs=1, verbose=2)
"""

SAVING_SCRIPT = """
import os, sys
import tensorflow as tf
print("rank", os.environ["SAGETRAIN_RANK"], "sum", float(tf.reduce_sum(tf.ones(3))), flush=True)
if os.environ["SAGETRAIN_RANK"] == "0":
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.txt"), "w") as f:
        f.write("1 2 3")
"""


def run_job(docker_client, image: str, root: Path, environment: dict[str, str] | None = None) -> RunResult:
    return run_in_image(
        docker_client, image, ["train"], timeout_s=JOB_DEADLINE_S,
        volumes={str(root): {"bind": "/opt/ml", "mode": "rw"}}, hostname="algo-1", environment=environment,
    )  # fmt: skip


def write_job(root: Path, files: dict[str, str], hyperparameters: dict, **job_files: object) -> Path:
    JobFiles(("algo-1",), hyperparameters, **job_files).write(root, "algo-1")  # type: ignore[arg-type]
    for name, text in files.items():
        (root / "code" / name).write_text(text)
    return root


MPI_2 = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2}


def test_a_keras_shape_error_is_the_first_sentence_of_the_failure_reason(docker_client, cpu_image, tmp_path):
    root = write_job(
        tmp_path / "ml", {"train.py": SHAPE_ERROR_SCRIPT}, {"sagemaker_program": "train.py", **MPI_2}
    )
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 1, result.output
    reason = (root / "output" / "failure").read_text()[:FAILURE_REASON_CHARS]
    first_line = reason.splitlines()[0]
    assert re.fullmatch(
        r"train\.py failed on rank [01] \(host algo-1\): ValueError: Input 0 with name 'None' of layer "
        r"'dense' is incompatible with the layer: expected axis -1 of input shape to have value 4, but "
        r"received input with shape \(None, 3\)",
        first_line,
    ), first_line
    assert "\x1b" not in reason and not TENSORFLOW_STARTUP.search(reason), reason
    # The traceback follows, with Keras' whole message, after the sentence.
    assert "Traceback (most recent call last):" in reason and "Arguments received by" in reason


def test_ranks_start_without_tensorflow_start_up_lines_and_say_who_they_are(
    docker_client, cpu_image, tmp_path
):
    root = write_job(tmp_path / "ml", {"train.py": SAVING_SCRIPT}, {"sagemaker_program": "train.py", **MPI_2})
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 0, result.output
    assert not TENSORFLOW_STARTUP.search(result.output), result.output
    lines = result.output.splitlines()
    assert "[algo-1 rank 0] rank 0 sum 3.0" in lines and "[algo-1 rank 1] rank 1 sum 3.0" in lines, (
        result.output
    )
    # The mpirun line is short; its whole command is for the debug level.
    assert "sagetrain INFO: starting 2 ranks with mpirun (2 per host on algo-1)" in result.output
    assert "mpirun command:" not in result.output
    assert "left /opt/ml/model empty" not in result.output


def test_a_misspelt_build_model_is_named_and_so_is_the_empty_model_folder(docker_client, cpu_image, tmp_path):
    module = (
        "def build_mdoel(hp):\n    raise AssertionError('never called')\n\n"
        "def input_fn(channel, hp):\n    raise AssertionError('never called')\n"
    )
    root = write_job(tmp_path / "ml", {"model.py": module}, {"sagemaker_program": "model.py", "epochs": 2})
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 0, result.output  # a plain script that does nothing succeeds...
    assert (
        "sagetrain WARNING: model.py defines build_mdoel but no build_model, so model.py runs as a plain "
        "script, not as a Keras model module in the managed trainer; if it is one, rename build_mdoel to "
        "build_model"
    ) in result.output
    # ...and is told so before it starts, then again for the model it did not leave.
    assert result.output.index("defines build_mdoel") < result.output.index("wrote /opt/ml/output/success")
    assert (
        "sagetrain WARNING: the job succeeded but left /opt/ml/model empty, so SageMaker uploads an empty "
        "model artifact"
    ) in result.output


def test_a_derived_images_sagemaker_program_runs_without_the_hyperparameter(
    docker_client, cpu_image, tmp_path
):
    context = tmp_path / "derived"
    context.mkdir()
    (context / "train.py").write_text("print('the derived image ran me')\n")
    (context / "Dockerfile").write_text(
        f"FROM {cpu_image}\nCOPY train.py /opt/ml/code/train.py\nENV SAGEMAKER_PROGRAM=train.py\n"
    )
    image = f"sagetrain-test-derived-{uuid.uuid4().hex[:12]}"
    DOCKER.run(["build", "--network", "none", "--label", f"{TEST_LABEL}=1", "-t", image, str(context)])
    try:
        root = tmp_path / "ml"
        JobFiles(("algo-1",), {"epochs": 1}).write(root, "algo-1")
        result = run_in_image(
            docker_client, image, ["train"], timeout_s=JOB_DEADLINE_S,
            volumes={str(root / "input"): {"bind": "/opt/ml/input", "mode": "ro"},
                     str(root / "output"): {"bind": "/opt/ml/output", "mode": "rw"}},
            hostname="algo-1",
        )  # fmt: skip
    finally:
        DOCKER.run(["image", "rm", "--force", image], check=False)
    assert result.exit_code == 0, result.output
    assert "the derived image ran me" in result.output
    assert "sagetrain INFO: program: train.py (it defines no top-level build_model" in result.output


def test_log_level_40_leaves_out_the_toolkits_info_lines(docker_client, cpu_image, tmp_path):
    hyperparameters = {"sagemaker_program": "train.py", "sagemaker_container_log_level": 40, **MPI_2}
    root = write_job(tmp_path / "ml", {"train.py": SAVING_SCRIPT}, hyperparameters)
    result = run_job(docker_client, cpu_image, root)
    assert result.exit_code == 0, result.output
    assert [line for line in result.output.splitlines() if "INFO" in line] == []
    assert "[algo-1 rank 1] rank 1 sum 3.0" in result.output  # the program's own lines stay


def test_the_checkpoint_configurations_local_path_is_written_and_resumed_from(
    docker_client, cpu_image, tmp_path
):
    example = Path(__file__).resolve().parents[2] / "examples" / "keras_digits"
    root = tmp_path / "ml"
    JobFiles(
        ("algo-1",), {"sagemaker_program": "model.py", "epochs": 1, "batch_size": 64}, (Channel("train"),),
        checkpoint_local_path="/opt/ml/checkpoints/run-2",
    ).write(root, "algo-1")  # fmt: skip
    (root / "code" / "model.py").write_bytes((example / "model.py").read_bytes())
    train = root / "input" / "data" / "train"
    train.mkdir(parents=True, exist_ok=True)
    for record in (example / "data" / "train").iterdir():
        (train / record.name).write_bytes(record.read_bytes())
    first = run_job(docker_client, cpu_image, root)
    assert first.exit_code == 0, first.output
    folder = root / "checkpoints" / "run-2"
    written = sorted(path.name for path in folder.glob("sagetrain-epoch*.npz"))
    assert written, f"no checkpoint in {folder}: {sorted(p.name for p in (root / 'checkpoints').rglob('*'))}"
    assert not list((root / "checkpoints").glob("*.npz")), "the default folder was written to"
    # The second job of the same tree (a restarted spot job) trains the epoch that is left, from there.
    (root / "input" / "config" / "hyperparameters.json").write_text(
        '{"sagemaker_program": "\\"model.py\\"", "epochs": "2", "batch_size": "64"}'
    )
    second = run_job(docker_client, cpu_image, root)
    assert second.exit_code == 0, second.output
    epochs = [int(m.group(1)) for m in re.finditer(r"^epoch=(\d+) ", second.output, re.MULTILINE)]
    assert epochs == [2], second.output
    assert "resuming" in second.output and str(Path("/opt/ml/checkpoints/run-2")) in second.output
