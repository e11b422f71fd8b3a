"""The TF_CONFIG engines across containers: MultiWorkerMirroredStrategy on 2 hosts with tf-keras `fit`
and with a Keras 3 `strategy.run` loop (identical weights on both workers), a Keras model module under
that strategy (trains correctly or is refused with a pointer to Horovod), and the parameter-server
layout, which must start and end without hanging on workers that serve forever (its Keras `fit` with
a TensorBoard callback on the chief, under the legacy-Keras switch)."""

import json

import pytest
from cluster import (
    CASES,
    TENSORFLOW_STARTUP,
    assert_identical_weights,
    exited_on_their_own,
    files_by_host,
    run_cluster,
    write_regression_csv,
)
from tensorboard_events import event_tags

pytestmark = [pytest.mark.container, pytest.mark.timeout(600)]

MWMS = {"sagemaker_multi_worker_mirrored_strategy_enabled": True}


def assert_every_host_succeeded(result):
    assert result.exit_code == 0, result.describe()
    assert set(result.exit_codes().values()) == {0}, result.describe()
    assert all(exited_on_their_own(result).values()), result.describe()
    for host in result.hosts:
        assert (result.tree(host) / "output" / "success").is_file(), f"{host} wrote no success file"


@pytest.mark.parametrize(
    ("case", "env"),
    [
        pytest.param("mwms_tfkeras", {"TF_USE_LEGACY_KERAS": "1"}, id="tf-keras-fit"),
        pytest.param("mwms_keras3_loop", {}, id="keras3-strategy-run"),
    ],
)
def test_multi_worker_mirrored_on_two_hosts_gives_identical_weights(tmp_path, cpu_image, case, env):
    data = write_regression_csv(tmp_path / "data", rows=96)
    result = run_cluster(
        tmp_path, cpu_image, 2, CASES / case, name=case, program="train.py", hyperparameters=MWMS,
        channels={"train": data}, env=env, extra=["--grace", "60"], timeout=480,
    )  # fmt: skip
    assert_every_host_succeeded(result)
    weights = files_by_host(result, "worker-*-weights.npz")
    # TF_CONFIG task index follows the host order: worker 0 on algo-1, worker 1 on algo-2.
    assert {host: [path.name for path in paths] for host, paths in weights.items()} == {
        "algo-1": ["worker-0-weights.npz"],
        "algo-2": ["worker-1-weights.npz"],
    }
    assert_identical_weights([paths[0] for paths in weights.values()])
    assert (result.output / "model" / "model.keras").is_file()


def test_model_module_trains_under_multi_worker_mirrored_on_two_hosts(tmp_path, cpu_image):
    """The managed trainer on the TF_CONFIG engine: one worker per host, every record of the channel read
    once per epoch between them, identical weights, epoch lines from the chief, and the model exported
    by the chief alone."""
    data = write_regression_csv(tmp_path / "data", rows=96)
    hps = {**MWMS, "epochs": 2, "batch_size": 16, "label_column": "label"}
    result = run_cluster(
        tmp_path, cpu_image, 2, CASES / "keras_module", name="mwms-module", program="model.py",
        hyperparameters=hps, channels={"train": data},
        env={"SAGETRAIN_TRAINER_REPORT_DIR": "/opt/ml/output/data/trainer-report"},
        extra=["--grace", "60"], timeout=480,
    )  # fmt: skip
    assert_every_host_succeeded(result)
    weights = [
        p for paths in files_by_host(result, "trainer-report/rank-*-weights.npz").values() for p in paths
    ]
    assert len(weights) == 2, weights
    assert_identical_weights(weights)
    reports = {
        host: [json.loads(path.read_text()) for path in paths]
        for host, paths in files_by_host(result, "trainer-report/rank-?.json").items()
    }
    assert {host: [report["rank"] for report in found] for host, found in reports.items()} == {
        "algo-1": [0],
        "algo-2": [1],
    }
    assert sum(found[0]["records"] for found in reports.values()) == 96, reports
    assert len({found[0]["steps_per_epoch"] for found in reports.values()}) == 1, reports
    epoch_lines = [line for line in result.host_lines("algo-1") if line.startswith("epoch=")]
    assert [line.split()[0] for line in epoch_lines] == ["epoch=1", "epoch=2"], result.describe()
    assert not [line for line in result.host_lines("algo-2") if line.startswith("epoch=")]
    assert (result.tree("algo-1") / "model" / "1" / "saved_model.pb").is_file()
    assert (result.tree("algo-1") / "model" / "model.keras").is_file()
    assert not any((result.tree("algo-2") / "model").iterdir()), "only the chief exports"


def test_parameter_server_layout_starts_and_ends(tmp_path, cpu_image):
    hps = {"sagemaker_parameter_server_enabled": True}
    result = run_cluster(
        tmp_path, cpu_image, 2, CASES / "ps_script", name="ps", program="train.py", hyperparameters=hps,
        extra=["--grace", "60"], timeout=480,
    )  # fmt: skip
    assert_every_host_succeeded(result)
    assert "serving as worker 0" in result.host_lines("algo-2"), result.describe()
    outcome = json.loads((result.output / "model" / "result.json").read_text())
    assert outcome == {"steps": 20, "weight": 20.0}
    # The parameter-server tasks print TensorFlow's start-up lines too (oneDNN's, on CPUs that have it on):
    # their launcher leaves them out, as the programs' do.
    assert not TENSORFLOW_STARTUP.search("\n".join(result.lines)), result.describe()


def test_keras_fit_under_parameter_server_trains_with_the_legacy_keras_switch(tmp_path, cpu_image):
    hps = {"sagemaker_parameter_server_enabled": True, "sagetrain_legacy_keras": True}
    result = run_cluster(
        tmp_path, cpu_image, 2, CASES / "ps_script", name="ps-fit", program="keras_fit.py",
        hyperparameters=hps, extra=["--grace", "60"], timeout=480,
    )  # fmt: skip
    assert_every_host_succeeded(result)
    losses = json.loads((result.output / "model" / "result.json").read_text())["losses"]
    assert len(losses) == 4 and losses[-1] < losses[0] / 10, losses
    # The tutorial's TensorBoard callback, on the chief (tf-keras), read by TensorBoard's own reader.
    train = event_tags(result.tree("algo-1") / "output" / "tensorboard")["train"]
    assert train["epoch_loss"] == [0, 1, 2, 3], train


def test_keras_3_fit_under_parameter_server_fails_naming_the_legacy_keras_switch(tmp_path, cpu_image):
    hps = {"sagemaker_parameter_server_enabled": True}
    result = run_cluster(
        tmp_path, cpu_image, 2, CASES / "ps_script", name="ps-fit-k3", program="keras_fit.py",
        hyperparameters=hps, extra=["--grace", "60"], timeout=480,
    )  # fmt: skip
    assert result.exit_code not in (0, None), result.describe()
    line = result.failure_line("algo-1") or ""
    assert line.startswith(
        "keras_fit.py failed on rank 0 (host algo-1): AttributeError: module 'keras.utils' has no attribute "
        "'experimental'; "
    ), result.describe()
    assert line.endswith(
        "if the program was written for Keras 2, run it with tf-keras as both keras and tf.keras: set the "
        "hyperparameter sagetrain_legacy_keras=true (or the environment variable SAGETRAIN_LEGACY_KERAS=1)"
    ), line
    # The serving worker does not keep the job alive once the chief failed.
    assert all(code not in (0, None) for code in result.exit_codes().values()), result.describe()
