"""`python -m sagetrain plan`: the plan as JSON, without running anything."""

import json
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "container" / "src"


def write(root, resources, hyperparameters):
    config = root / "input" / "config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps(resources))
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    (config / "inputdataconfig.json").write_text(json.dumps({"train": {"TrainingInputMode": "File"}}))


def plan(root, *args):
    result = subprocess.run(
        [sys.executable, "-m", "sagetrain", "plan", "--root", str(root), *args],
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    return result


def test_plans_a_p4d_job_as_if_it_had_gpus(tmp_path):
    write(
        tmp_path,
        {"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "network_interface_name": "eth0"},
        {"sagemaker_program": '"train.py"', "epochs": "2"},
    )
    result = plan(tmp_path, "--gpus", "8")
    assert result.returncode == 0, result.stderr
    description = json.loads(result.stdout)
    assert description["engine"] == "horovod"
    assert description["total_processes"] == 16
    assert description["processes_per_host"] == {"algo-1": 8, "algo-2": 8}
    command = description["launch"]["command"]
    assert command[:5] == ["mpirun", "-np", "16", "-H", "algo-1:8,algo-2:8"]
    # No sagetrain-rank on this PATH: the job would start ranks through the module, as the dry run says.
    assert command[-8:] == [
        sys.executable,
        "-m",
        "sagetrain.launch.rank",
        "--",
        sys.executable,
        str(tmp_path / "code" / "train.py"),
        "--epochs",
        "2",
    ]
    env = description["launch"]["env"]
    assert env["SAGETRAIN_COORDINATOR"] == "algo-1:7077"
    assert env["SM_HOSTS"] == '["algo-1","algo-2"]'
    assert env["SAGETRAIN_PROGRAM"] == "train.py"
    assert not (tmp_path / "output").exists()


def test_plans_tf_config_for_every_host(tmp_path):
    write(
        tmp_path,
        {"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]},
        {"sagemaker_program": '"train.py"', "sagemaker_multi_worker_mirrored_strategy_enabled": "true"},
    )
    description = json.loads(plan(tmp_path).stdout)
    configs = [json.loads(description["launch"][h]["env"]["TF_CONFIG"]) for h in ("algo-1", "algo-2")]
    assert configs[0]["cluster"] == configs[1]["cluster"]
    assert [c["task"]["index"] for c in configs] == [0, 1]
    # Each host's program runs with its own identity, as its rank launcher sets it.
    for host in ("algo-1", "algo-2"):
        env = description["launch"][host]["env"]
        assert env["SM_CURRENT_HOST"] == env["CURRENT_HOST"] == host
        assert json.loads(env["SM_TRAINING_ENV"])["current_host"] == host


def test_bad_input_is_one_sentence_and_nonzero(tmp_path):
    write(tmp_path, {"current_host": "algo-3", "hosts": ["algo-1"]}, {})
    result = plan(tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().endswith("current_host 'algo-3' is not in hosts ['algo-1']")
