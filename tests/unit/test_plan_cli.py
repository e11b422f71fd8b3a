"""`python -m sagetrain plan`: the plan as JSON, without running anything."""

import json
import os
import subprocess
import sys
from pathlib import Path

from sagetrain.config.channels import Channel
from sagetrain.config.job_files import JobFiles
from sagetrain.config.toolkit_env import rebased_env_vars, with_fields

SRC = Path(__file__).resolve().parents[2] / "container" / "src"


def write(root, hosts, hyperparameters, current=None):
    """A tree as SageMaker writes it on ``current`` (the first host by default), with a train channel."""
    JobFiles(tuple(hosts), hyperparameters, (Channel("train"),)).write(root, current or hosts[0])


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
        ["algo-1", "algo-2"],
        {"sagemaker_program": "train.py", "epochs": 2},
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
    assert not (tmp_path / "output" / "success").exists() and not (tmp_path / "output" / "failure").exists()


def test_plans_tf_config_for_every_host(tmp_path):
    write(
        tmp_path,
        ["algo-1", "algo-2"],
        {"sagemaker_program": "train.py", "sagemaker_multi_worker_mirrored_strategy_enabled": True},
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
    write(tmp_path, ["algo-1"], {})
    (tmp_path / "input" / "config" / "resourceconfig.json").write_text(
        json.dumps({"current_host": "algo-3", "hosts": ["algo-1"]})
    )
    result = plan(tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().endswith("current_host 'algo-3' is not in hosts ['algo-1']")


def test_a_bad_input_sentence_masks_the_jobs_secrets(tmp_path):
    secret = "hunter2's-secret"
    write(
        tmp_path,
        ["algo-1"],
        {"sagemaker_program": "train.py", "api_token": secret, "sagetrain_ssh_port": secret},
    )
    result = plan(tmp_path)
    assert result.returncode == 1
    assert result.stderr.rstrip().endswith('field sagetrain_ssh_port must be an integer >= 1, got "***"')
    assert "hunter2" not in result.stderr


def tree_listing(root):
    return sorted((str(path.relative_to(root)), path.stat().st_mtime_ns) for path in root.rglob("*"))


def test_the_dry_run_shows_the_planned_gpus_and_writes_nothing_under_the_root(tmp_path):
    write(
        tmp_path,
        ["algo-1", "algo-2"],
        {"sagemaker_program": "train.py", "sagemaker_mpi_enabled": True},
    )
    before = tree_listing(tmp_path)
    result = plan(tmp_path, "--gpus", "8", "--cpus", "96")
    assert result.returncode == 0, result.stderr
    env = json.loads(result.stdout)["launch"]["env"]
    training_env = json.loads(env["SM_TRAINING_ENV"])
    assert (env["SM_NUM_GPUS"], training_env["num_gpus"]) == ("8", 8)
    assert (env["SM_NUM_CPUS"], training_env["num_cpus"]) == ("96", 96)
    # The paths are the job's, although the toolkit was imported under a scratch root.
    assert env["SM_MODEL_DIR"] == str(tmp_path / "model")
    assert training_env["module_dir"] == str(tmp_path / "code")
    assert env["SM_CHANNEL_TRAIN"] == str(tmp_path / "input" / "data" / "train")
    assert tree_listing(tmp_path) == before  # no <root>/code, nothing else


def test_the_dry_run_leaves_this_processs_environment_as_it_was(tmp_path, monkeypatch):
    from sagetrain.__main__ import plan_command

    write(tmp_path, ["algo-1"], {"sagemaker_program": "train.py"})
    monkeypatch.delenv("SAGEMAKER_BASE_DIR", raising=False)
    before = dict(os.environ)
    description = plan_command(tmp_path, gpus=2)
    assert description["launch"]["env"]["SM_CURRENT_HOST"] == "algo-1"
    assert dict(os.environ) == before


def test_toolkit_paths_move_to_the_jobs_root_and_json_values_stay_byte_exact():
    variables = {
        "SM_MODEL_DIR": "/tmp/scratch/model",
        "SM_TRAINING_ENV": '{"channel_input_dirs":{"train":"/tmp/scratch/input/data/train"},"num_gpus":0}',
        "SM_HP_LAYOUT": "[1, 2]",  # a user's string that only looks like JSON
        "SM_HP_NOTE": "/tmp/scratchpad",  # not under the scratch root
    }
    assert rebased_env_vars(variables, "/tmp/scratch", "/opt/ml") == {
        "SM_MODEL_DIR": "/opt/ml/model",
        "SM_TRAINING_ENV": '{"channel_input_dirs":{"train":"/opt/ml/input/data/train"},"num_gpus":0}',
        "SM_HP_LAYOUT": "[1, 2]",
        "SM_HP_NOTE": "/tmp/scratchpad",
    }


def test_sm_num_gpus_is_the_count_the_job_uses():
    variables = {"SM_NUM_GPUS": "8", "SM_NUM_CPUS": "96", "SM_TRAINING_ENV": '{"num_cpus":96,"num_gpus":8}'}
    # e.g. CUDA_VISIBLE_DEVICES=0,1 on an 8-GPU host: detect_devices counts 2
    assert {**variables, **with_fields(variables, {"num_gpus": 2})} == {
        "SM_NUM_GPUS": "2",
        "SM_NUM_CPUS": "96",
        "SM_TRAINING_ENV": '{"num_cpus":96,"num_gpus":2}',
    }
