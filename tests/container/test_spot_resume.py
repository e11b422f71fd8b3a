"""Managed spot training's resume on the image's Keras 3 (container/keras/patches 0009 to 0011), with the
script's own code (cases/spot_resume/train.py): a first job trains a classifier whose last layer is
`Dense(4, activation=tf.nn.softmax)` and leaves ModelCheckpoint files in /opt/ml/checkpoints, both `.keras`
and `.h5`; the restarted job, on the same tree, loads the newest `.h5` checkpoint with `load_model` and trains
one more epoch. On Keras 3.15.1 as released it fails there: "Could not locate function 'softmax_v2'", then
(with that fixed) "Unknown variable" in its first `fit`, and its `.keras` checkpoints come back with RMSprop.
"""

import json

import numpy as np
import pytest
from cluster import CASES, run_cluster, run_workdir

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

SPOT = CASES / "spot_resume"
JOB_TIMEOUT_S = 400


def set_epochs(workdir, epochs: int) -> None:
    """As SageMaker writes hyperparameters: each value a JSON-encoded string."""
    path = workdir / "algo-1" / "input" / "config" / "hyperparameters.json"
    hyperparameters = json.loads(path.read_text())
    hyperparameters["epochs"] = json.dumps(epochs)
    path.write_text(json.dumps(hyperparameters))


def test_a_restarted_spot_job_resumes_from_its_newest_checkpoint_with_the_saved_model(tmp_path, cpu_image):
    checkpoints = tmp_path / "checkpoints"
    run_flags = ["--checkpoints", str(checkpoints)]
    first = run_cluster(
        tmp_path, cpu_image, 1, SPOT, name="spot-first", program="train.py", hyperparameters={"epochs": 2},
        extra=run_flags, timeout=JOB_TIMEOUT_S,
    )  # fmt: skip
    assert first.exit_code == 0, first.describe()
    written = sorted(path.name for path in checkpoints.iterdir())
    assert written == ["checkpoint-1.h5", "checkpoint-1.keras", "checkpoint-2.h5", "checkpoint-2.keras"]
    first_reports = first.tree("algo-1") / "output" / "data"
    trained = dict(np.load(first_reports / "trained.npz"))
    trained_facts = json.loads((first_reports / "trained.json").read_text())
    assert trained_facts["optimizer"] == "Adam" and trained_facts["steps"] > 0, trained_facts

    # The restarted job: the same tree and checkpoints, one more epoch asked for.
    set_epochs(first.workdir, 3)
    resumed = run_workdir(tmp_path, cpu_image, first.workdir, name="spot-resume", extra=run_flags,
                          timeout=JOB_TIMEOUT_S)  # fmt: skip
    assert resumed.exit_code == 0, resumed.describe()
    said = "resuming from checkpoint-2.h5 at epoch 3"
    assert any(said in line for line in resumed.lines), resumed.describe()
    reports = resumed.tree("algo-1") / "output" / "data"
    loaded = json.loads((reports / "resumed.json").read_text())
    for file_format in ("h5", "keras"):
        # Right after loading, before training continues: the first job's last model, predictions included,
        # with its optimizer and that optimizer's step count.
        at_resume = np.load(reports / f"resumed-{file_format}.npz")
        assert sorted(at_resume.files) == sorted(trained), (file_format, at_resume.files)
        for name, values in trained.items():
            np.testing.assert_array_equal(at_resume[name], values, err_msg=f"{file_format}: {name}")
        assert loaded[file_format] == {"optimizer": "Adam", "steps": trained_facts["steps"]}, loaded
    finished = json.loads((reports / "trained.json").read_text())
    assert finished["epochs"] == 3 and finished["steps"] == trained_facts["steps"] * 3 // 2, finished
    assert {"checkpoint-3.h5", "checkpoint-3.keras"} <= {path.name for path in checkpoints.iterdir()}
    assert (resumed.output / "model" / "model.keras").is_file()
