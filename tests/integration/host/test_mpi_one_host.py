"""The entry runs a user script as 2 MPI ranks on one host with real OpenMPI."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sagetrain.config.job_files import JobFiles
from sagetrain.config.resources import InstanceGroup

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
    "sagemaker_program": "train.py",
    "sagemaker_mpi_enabled": True,
    "sagemaker_mpi_num_of_processes_per_host": 2,
    "sagemaker_container_log_level": 10,  # DEBUG: the master logs the whole mpirun command
    "epochs": 3,
    "sagetrain_ssh_port": 2222,
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
    assert (
        lines[0]
        == "train.py exited with code 3 on rank 1 (host algo-1-abcde); its last line: 'giving up on purpose'"
    )
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
    assert text.splitlines()[0] == "train.py failed on rank 0 (host algo-1-abcde): channel train is empty"
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
    assert not tree.success.exists() and not tree.failure.exists(), "the dry run wrote a report"
    code, output = tree.run()
    assert code == 0, output
    logged = re.search(r"mpirun command: (.*)", output)
    assert logged, output
    assert description["launch"]["command"] == shlex.split(logged.group(1))
    added = description["launch"]["env"]
    assert (added["SAGETRAIN_PROGRAM"], added["SM_CURRENT_HOST"]) == ("train.py", "algo-1-abcde")
    assert "SAGETRAIN_RUN_DIR" not in added  # the tree's environment sets it already


WORKER_IDENTITY_SCRIPT = """
import json, os
rank = os.environ["SAGETRAIN_RANK"]
names = ("SM_CURRENT_HOST", "SM_RESOURCE_CONFIG", "SM_CURRENT_INSTANCE_TYPE", "SM_CURRENT_INSTANCE_GROUP",
         "SM_NUM_GPUS", "SM_NUM_CPUS", "SM_TRAINING_ENV")
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump({name: os.environ[name] for name in names}, f)
"""


@pytest.mark.timeout(120)
def test_ranks_take_identity_config_and_device_counts_from_the_host_they_run_on(job, tmp_path):
    """Ranks as mpirun starts them on a worker host: with the master's environment, but their host's own
    /opt/ml and run folder. Here the "worker host" is a second tree, which the custom MPI options point
    the ranks at; its host.json is what that host's entry would have written."""
    groups = (
        InstanceGroup("cpus", "ml.c5.xlarge", ("algo-1-abcde",)),
        InstanceGroup("gpus", "ml.p4d.24xlarge", ("algo-2-fghij",)),
    )
    worker_root = tmp_path / "worker" / "opt" / "ml"
    worker_files = JobFiles(("algo-1-abcde", "algo-2-fghij"), {}, instance_groups=groups)
    worker_config = json.loads(worker_files.write(worker_root, "algo-2-fghij").resource_config.read_text())
    worker_run = tmp_path / "worker" / "run"
    worker_run.mkdir()
    (worker_run / "host.json").write_text(json.dumps({"host": "algo-2-fghij", "num_gpus": 8, "num_cpus": 96}))
    tree = job(
        {
            **MPI,
            "sagemaker_mpi_custom_mpi_options": (
                f"-x SAGEMAKER_BASE_DIR={worker_root} -x SAGETRAIN_RUN_DIR={worker_run}"
            ),
        }
    )
    tree.write_code("train.py", WORKER_IDENTITY_SCRIPT)
    code, output = tree.run()
    assert code == 0, output
    for rank in (0, 1):
        record = json.loads((tree.model_dir / f"rank-{rank}.json").read_text())
        assert record["SM_CURRENT_HOST"] == "algo-2-fghij"
        assert json.loads(record["SM_RESOURCE_CONFIG"]) == worker_config
        assert (record["SM_CURRENT_INSTANCE_TYPE"], record["SM_CURRENT_INSTANCE_GROUP"]) == (
            "ml.p4d.24xlarge",
            "gpus",
        )
        assert (record["SM_NUM_GPUS"], record["SM_NUM_CPUS"]) == ("8", "96")
        training_env = json.loads(record["SM_TRAINING_ENV"])
        assert training_env["current_host"] == "algo-2-fghij"
        assert training_env["resource_config"] == worker_config
        assert (training_env["num_gpus"], training_env["num_cpus"]) == (8, 96)
        assert training_env["is_master"] is False
    # The master's own entry wrote its facts for the ranks on its host.
    facts = json.loads((tree.run_dir / "host.json").read_text())
    assert facts["host"] == "algo-1-abcde"


@pytest.mark.timeout(60)
def test_an_mpirun_that_never_starts_its_ranks_fails_the_job_when_the_launch_wait_ends(job, tmp_path):
    """An mpirun whose ranks never start (orted never calls back) stands in as a script: the real one
    cannot be made to hang on one host."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hanging = bin_dir / "mpirun"
    hanging.write_text('#!/bin/sh\necho $$ > "$(dirname "$0")/pid"\nexec sleep 300\n')
    hanging.chmod(0o755)
    tree = job({**MPI, "sagetrain_launch_wait_seconds": 2})
    tree.write_code("train.py", "print('never runs')\n")
    code, output = tree.run(PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert code == 2, output
    assert tree.failure.read_text().splitlines()[0] == (
        "timed out after 2 s waiting for mpirun to start all 2 ranks (not started: algo-1-abcde: ranks 0-1); "
        "if ranks start slowly, raise the hyperparameter sagetrain_launch_wait_seconds"
    )
    pid = int((bin_dir / "pid").read_text())
    status = Path(f"/proc/{pid}/status")
    assert not status.exists() or "zombie" in status.read_text()  # mpirun was stopped


FAKE_MPIRUN_SLOW_TO_STOP = """#!{python}
import os, pathlib, signal, threading
here = pathlib.Path(__file__).parent
signal.signal(signal.SIGTERM, lambda *_: (here / "terminated").touch())  # and carries on: slow to stop
(here / "pid").write_text(str(os.getpid()))
threading.Event().wait(300)
"""


@pytest.mark.timeout(60)
def test_the_launch_timeout_stays_the_verdict_when_sigterm_comes_while_mpirun_is_being_stopped(job, tmp_path):
    """SageMaker's local mode stops the other containers once one exits: a SIGTERM while the master stops
    mpirun after it decided must not turn its verdict into "stopped by SIGTERM"."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mpirun"
    fake.write_text(FAKE_MPIRUN_SLOW_TO_STOP.format(python=sys.executable))
    fake.chmod(0o755)
    tree = job({**MPI, "sagetrain_launch_wait_seconds": 1})
    tree.write_code("train.py", "print('never runs')\n")
    process = tree.start(PATH=f"{bin_dir}:{os.environ['PATH']}")
    terminated = bin_dir / "terminated"
    deadline = time.monotonic() + 30
    while not terminated.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the entry decided and is stopping mpirun: SIGTERM it now
    assert terminated.exists(), "the entry never stopped mpirun"
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate()
    assert process.returncode == 2, output
    assert tree.failure.read_text().splitlines()[0] == (
        "timed out after 1 s waiting for mpirun to start all 2 ranks (not started: algo-1-abcde: ranks 0-1); "
        "if ranks start slowly, raise the hyperparameter sagetrain_launch_wait_seconds"
    )
    assert "SIGTERM ignored: the job is over" in output


SECRETS_SCRIPT = """
import json, os, sys
rank = os.environ["SAGETRAIN_RANK"]
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"secrets-{rank}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "aws": os.environ.get("AWS_SECRET_ACCESS_KEY")}, f)
print("about to fail with token", sys.argv[sys.argv.index("--api_token") + 1], flush=True)
sys.exit(3)
"""


@pytest.mark.timeout(120)
def test_secret_values_reach_the_program_but_not_our_log_or_failure_file(job):
    token, aws_secret = "tok-0123456789", "aws-SECRET-abcdef"
    tree = job(
        {
            **MPI,
            "api_token": token,
            "sagemaker_mpi_custom_mpi_options": "-x WANDB_API_KEY=wandb-0123456789",
        }
    )
    tree.write_code("train.py", SECRETS_SCRIPT)
    code, output = tree.run(AWS_SECRET_ACCESS_KEY=aws_secret)
    assert code == 3, output
    for rank in (0, 1):
        received = json.loads((tree.model_dir / f"secrets-{rank}.json").read_text())
        assert received["argv"][received["argv"].index("--api_token") + 1] == token
        assert received["aws"] == aws_secret
    logged = re.search(r"mpirun command: (.*)", output)
    assert logged, output
    assert "AWS_SECRET_ACCESS_KEY" not in logged.group(1)  # not forwarded: each host has its own
    # Masked, then quoted as a shell reads it: "***" holds glob characters.
    assert "--api_token '***'" in logged.group(1) and "-x 'WANDB_API_KEY=***'" in logged.group(1)
    our_lines = [line for line in output.splitlines() if line.startswith("sagetrain ")]
    assert our_lines and not any(secret in line for line in our_lines for secret in (token, aws_secret))
    failure = tree.failure.read_text()
    assert "about to fail with token ***" in failure
    assert token not in failure and "wandb-0123456789" not in failure


LARGE_JOB_SCRIPT = """
import json, os, sys
rank = os.environ["SAGETRAIN_RANK"]
with open(os.environ["SM_HPS_FILE"]) as f:
    hps = json.load(f)
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"large-{rank}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "hps": hps, "inline": "SM_HPS" in os.environ}, f)
"""


@pytest.mark.timeout(120)
def test_a_job_at_sagemakers_hyperparameter_limits_runs_and_every_value_reaches_the_program(job):
    # SageMaker accepts 100 hyperparameters of up to 2,500 characters.
    large = {f"hp_{index:02d}": f"{index}" + "v" * 2400 for index in range(98)}
    tree = job({**MPI, **large})
    tree.write_code("train.py", LARGE_JOB_SCRIPT)
    code, output = tree.run()
    assert code == 0, output[-3000:]
    assert "SM_HPS is " in output and "too long for the environment" in output
    for rank in (0, 1):
        received = json.loads((tree.model_dir / f"large-{rank}.json").read_text())
        argv = received["argv"]
        assert {argv[i][2:]: argv[i + 1] for i in range(0, len(argv), 2)} == {**large, "epochs": "3"}
        assert {key: received["hps"][key] for key in large} == large
        assert not received["inline"]


QUOTED_SECRETS_SCRIPT = """
import json, os, sys
rank = os.environ["SAGETRAIN_RANK"]
seen = {"argv": sys.argv[1:], "env": os.environ.get("WANDB_API_KEY"), "hf": os.environ.get("HF_TOKEN")}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"seen-{rank}.json"), "w") as f:
    json.dump(seen, f)
if rank == "1":
    with open(os.environ["SAGETRAIN_ERROR_FILE"], "w") as f:
        json.dump({"message": f"cannot use {seen!r}", "traceback": json.dumps(seen)}, f)
    sys.exit(1)
"""


@pytest.mark.timeout(120)
def test_secrets_given_every_way_are_in_no_line_the_entry_writes(job):
    """A secret holding quotes, spaces, a backslash and $ as a secret-named hyperparameter, under a key
    nested in a dict-valued one, as a variable and as a custom ``-x`` option: the program gets each as
    given; the entry's log (the mpirun line included) and the failure file hold none, in any quoting."""
    hp, nested, env, option = "SQ'HP\"se cret\\1", "NESTED'pw\"x", "ENV'var $HOME", "OPT'val ue"
    tree = job(
        {
            **MPI,
            "api_token": hp,
            "db": {"user": "bob", "password": nested},
            "sagemaker_mpi_custom_mpi_options": f"-x HF_TOKEN={shlex.quote(option)}",
        }
    )
    tree.write_code("train.py", QUOTED_SECRETS_SCRIPT)
    code, output = tree.run(WANDB_API_KEY=env)
    assert code == 1, output
    seen = json.loads((tree.model_dir / "seen-0.json").read_text())
    assert seen["argv"][seen["argv"].index("--api_token") + 1] == hp
    assert (seen["env"], seen["hf"]) == (env, option)
    logged = re.search(r"mpirun command: (.*)", output)
    assert logged, output
    assert "-x 'HF_TOKEN=***'" in logged.group(1) and "--api_token '***'" in logged.group(1)
    failure = tree.failure.read_text()
    assert failure.startswith("train.py failed on rank 1 (host algo-1-abcde): cannot use")
    for secret in (hp, nested, env, option):
        for form in (secret, shlex.quote(secret), json.dumps(secret), repr(secret), secret.split("'")[1]):
            assert form not in output and form not in failure, form
