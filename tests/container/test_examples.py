"""The three examples under examples/, each run the way the README tells a user to run it.

- keras_digits (a Keras model module): through scripts/run-example.sh, the README's main command, on
  a simulated 2-host cluster.
- script_mode (an AWS script-mode script): one host, single process, as on a one-instance estimator.
- horovod_script (a plain Horovod script): 2 hosts × 1 rank over MPI; every rank must end with the
  same weights and report its own host.

Both scripts log to SageMaker's TensorBoard output folder with Keras' TensorBoard callback (the Horovod
one from rank 0 only): TensorBoard's own reader must find each epoch's scalars and histograms there.
"""

import re
import subprocess
from pathlib import Path

import pytest
from cluster import REPO, run_cluster
from tensorboard_events import event_files, event_tags

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

EXAMPLES = REPO / "examples"
DIGITS_DATA = EXAMPLES / "keras_digits" / "data"


def assert_exported_model(model_dir: Path) -> None:
    assert (model_dir / "1" / "saved_model.pb").is_file(), sorted(p.name for p in model_dir.iterdir())
    assert (model_dir / "model.keras").is_file(), sorted(p.name for p in model_dir.iterdir())


def assert_tensorboard_logs(folder: Path, epochs: int, metrics: tuple[str, ...]) -> None:
    runs = event_tags(folder)
    steps = list(range(epochs))
    assert {f"epoch_{name}": steps for name in metrics}.items() <= runs["train"].items(), runs
    assert "keras" in runs["train"], runs  # the model's graph
    assert any(tag.endswith("/histogram") for tag in runs["train"]), runs


def test_run_example_trains_the_keras_module_on_two_hosts_and_says_where_the_model_is(tmp_path, cpu_image):
    output = tmp_path / "digits"
    completed = subprocess.run(
        ["scripts/run-example.sh", "--epochs", "3", "--output", str(output)],
        cwd=REPO, capture_output=True, text=True, timeout=840,
    )  # fmt: skip
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log[-6000:]
    where = re.search(r"^local-cluster: model: (.+)$", completed.stdout, re.MULTILINE)
    assert where, log[-3000:]
    model_dir = Path(where.group(1))
    assert model_dir == (output / "model").resolve()
    assert_exported_model(model_dir)
    # Both hosts trained: rank 1 ran on algo-2 (the trainer names every rank's host at start).
    assert re.search(r"^algo-2\s*\|", completed.stdout, re.MULTILINE), log[-3000:]
    test_line = re.search(r"\btest loss=[0-9.]+ accuracy=([0-9.]+)", completed.stdout)
    assert test_line, log[-3000:]
    print("digits test accuracy after 3 epochs on 2 hosts:", test_line.group(1))
    assert float(test_line.group(1)) > 0.8
    # The job had a secret, given as the README recommends: a channel file.
    assert "no job secret" not in log


def test_script_mode_example_runs_as_one_process_and_saves_for_serving(tmp_path, cpu_image):
    result = run_cluster(
        tmp_path, cpu_image, 1, EXAMPLES / "script_mode", name="script-mode", program="train.py",
        hyperparameters={"epochs": 5, "batch_size": 64},
        channels={"train": DIGITS_DATA / "train", "validation": DIGITS_DATA / "validation"},
    )  # fmt: skip
    assert result.exit_code == 0, result.describe()
    assert_exported_model(result.output / "model")
    final = re.search(r"final .*\bval_accuracy=([0-9.]+)", result.log())
    assert final, result.describe()
    print("script-mode validation accuracy after 5 epochs:", final.group(1))
    assert float(final.group(1)) > 0.8
    assert_tensorboard_logs(result.tree("algo-1") / "output" / "tensorboard", 5, ("loss", "accuracy"))


def test_horovod_example_ends_with_identical_weights_on_both_hosts(tmp_path, cpu_image):
    result = run_cluster(
        tmp_path, cpu_image, 2, EXAMPLES / "horovod_script", name="hvd-example", program="train.py",
        hyperparameters={"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 1,
                         "epochs": 2},
        channels={"train": DIGITS_DATA / "train"},
    )  # fmt: skip
    assert result.exit_code == 0, result.describe()
    reports = dict(
        (int(m.group(1)), (m.group(2), m.group(3)))
        for m in re.finditer(r"rank=(\d+) host=(\S+) weights_sha256=([0-9a-f]{64})", result.log())
    )
    assert sorted(reports) == [0, 1], result.describe()
    assert {host for host, _ in reports.values()} == {"algo-1", "algo-2"}, reports
    assert reports[0][1] == reports[1][1], f"ranks ended with different weights: {reports}"
    assert_exported_model(result.output / "model")
    assert_tensorboard_logs(result.tree("algo-1") / "output" / "tensorboard", 2, ("loss", "accuracy"))
    assert event_files(result.tree("algo-2") / "output" / "tensorboard") == []
