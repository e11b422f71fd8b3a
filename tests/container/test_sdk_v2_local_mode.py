"""The SageMaker SDK v2's `TensorFlow` estimator in local mode, as in the README: 2 instances of the CPU
image, `distribution={"mpi": …}`, the source folder mounted (`local_code`), file:// channels and output
(sdk_local_mode.py: the real SDK, no AWS account, no network beyond the local Docker engine). The SDK
names its hosts algo-1-<suffix>, algo-2-<suffix>; the job runs 4 Horovod ranks over both with identical
weights, and the dummy credentials the SDK puts in the containers reach no rank."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from cluster import CASES, write_regression_csv
from sdk_local_mode import (
    SDK_V2,
    assert_ranks_spread_with_identical_weights,
    local_mode_project,
    run_sdk_job,
    sdk_python,
)

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

JOB_SCRIPT = Path(__file__).resolve().parent / "sdk_v2_estimator_job.py"
JOB_SECONDS = 600


def test_the_tensorflow_estimator_with_mpi_trains_on_two_hosts(tmp_path, cpu_image, docker_client):
    sdk = sdk_python(SDK_V2)
    output = tmp_path / "output"
    output.mkdir()
    job = {
        "image": cpu_image,
        "hosts": 2,
        "entry_point": "train.py",
        "source_dir": str(CASES / "hvd_script"),
        "distribution": {"mpi": {"enabled": True, "processes_per_host": 2}},
        "hyperparameters": {"epochs": 2},
        "output_path": output.as_uri(),
        "channels": {"train": str(write_regression_csv(tmp_path / "train", rows=256))},
    }
    with local_mode_project(docker_client) as project:
        run = run_sdk_job(sdk, JOB_SCRIPT, job, project, tmp_path, JOB_SECONDS)
    assert run.exit_code == 0, run.describe()
    with tarfile.open(output / "output.tar.gz") as archive:
        archive.extractall(tmp_path / "job-output", filter="data")
    hosts = assert_ranks_spread_with_identical_weights(tmp_path / "job-output" / "data", 2, per_host=2)
    assert [host.rsplit("-", 1)[0] for host in hosts] == ["algo-1", "algo-1", "algo-2", "algo-2"], hosts
    mpirun = [line for line in run.output.splitlines() if "mpirun command:" in line]
    assert len(mpirun) == 1, run.describe()
    assert "AWS_ACCESS_KEY_ID" not in mpirun[0] and "AWS_SECRET_ACCESS_KEY" not in mpirun[0], mpirun[0]
