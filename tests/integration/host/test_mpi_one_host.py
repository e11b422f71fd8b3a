"""The entry runs a user script as 2 MPI ranks on one host with real OpenMPI."""

import json
import re
import shlex
import subprocess
import sys

import pytest
from conftest import encode

RANK_SCRIPT = """
import json, os, sys
rank = os.environ["SAGETRAIN_RANK"]
record = {name: os.environ.get(name) for name in (
    "SAGETRAIN_RANK", "SAGETRAIN_LOCAL_RANK", "SAGETRAIN_SIZE", "SAGETRAIN_LOCAL_SIZE", "SM_CURRENT_HOST",
    "CURRENT_HOST", "SAGETRAIN_ENGINE", "SM_HP_EPOCHS", "OMPI_COMM_WORLD_RANK")}
record["argv"] = sys.argv[1:]
record["training_env_host"] = json.loads(os.environ["SM_TRAINING_ENV"])["current_host"]
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump(record, f)
"""

MPI = {
    "sagemaker_program": encode("train.py"),
    "sagemaker_mpi_enabled": "true",
    "sagemaker_mpi_num_of_processes_per_host": "2",
    "epochs": "3",
    "sagetrain_ssh_port": "2222",
}


@pytest.mark.timeout(120)
def test_two_ranks_each_know_rank_local_rank_size_and_host(job):
    tree = job(MPI)
    tree.write_code("train.py", RANK_SCRIPT)
    code, output = tree.run()
    assert code == 0, output
    records = [json.loads((tree.model_dir / f"rank-{r}.json").read_text()) for r in (0, 1)]
    for rank, record in enumerate(records):
        assert record["SAGETRAIN_RANK"] == str(rank) == record["OMPI_COMM_WORLD_RANK"]
        assert record["SAGETRAIN_LOCAL_RANK"] == str(rank)
        assert record["SAGETRAIN_SIZE"] == "2"
        assert record["SAGETRAIN_LOCAL_SIZE"] == "2"
        assert (
            record["SM_CURRENT_HOST"]
            == "algo-1-abcde"
            == record["CURRENT_HOST"]
            == record["training_env_host"]
        )
        assert record["SAGETRAIN_ENGINE"] == "horovod"
        assert record["SM_HP_EPOCHS"] == "3"
        assert record["argv"] == ["--epochs", "3"]
    assert tree.success.exists()
    assert not tree.failure.exists()


@pytest.mark.timeout(120)
def test_a_rank_exiting_3_fails_the_job_naming_script_rank_and_code(job):
    tree = job(MPI)
    tree.write_code(
        "train.py",
        """
import os, sys, threading
print("rank", os.environ["SAGETRAIN_RANK"], "started", flush=True)
if os.environ["SAGETRAIN_RANK"] == "1":
    print("giving up on purpose", file=sys.stderr)
    sys.exit(3)
threading.Event().wait(60)  # rank 0 would wait forever; mpirun must stop it
""",
    )
    code, output = tree.run()
    assert code == 3, output
    lines = tree.failure.read_text().splitlines()
    assert lines[0] == "train.py exited with code 3 on rank 1 (host algo-1-abcde)"
    assert "giving up on purpose" in lines
    assert not tree.success.exists()


@pytest.mark.timeout(120)
def test_error_file_message_reaches_the_failure_file(job):
    tree = job(MPI)
    tree.write_code(
        "train.py",
        """
import json, os, sys
if os.environ["SAGETRAIN_RANK"] == "0":
    with open(os.environ["SAGETRAIN_ERROR_FILE"], "w") as f:
        json.dump({"message": "channel train is empty", "traceback": "Traceback: here"}, f)
    sys.exit(1)
""",
    )
    code, _ = tree.run()
    assert code == 1
    text = tree.failure.read_text()
    assert (
        text.splitlines()[0]
        == "train.py exited with code 1 on rank 0 (host algo-1-abcde): channel train is empty"
    )
    assert "Traceback: here" in text


@pytest.mark.timeout(120)
def test_the_dry_run_prints_the_mpirun_line_the_job_runs(job):
    tree = job(MPI)
    tree.write_code("train.py", "print('ran')\n")
    planned = subprocess.run(
        [sys.executable, "-m", "sagetrain", "plan"],
        env=tree.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert planned.returncode == 0, planned.stderr
    description = json.loads(planned.stdout)
    assert not (tree.root / "output").exists(), "the dry run wrote a report"
    code, output = tree.run()
    assert code == 0, output
    logged = re.search(r"mpirun command: (.*)", output)
    assert logged, output
    assert description["launch"]["command"] == shlex.split(logged.group(1))
    added = description["launch"]["env"]
    assert (added["SAGETRAIN_PROGRAM"], added["SM_CURRENT_HOST"]) == ("train.py", "algo-1-abcde")
    assert "SAGETRAIN_RUN_DIR" not in added  # the tree's environment sets it already
