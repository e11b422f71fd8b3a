"""The SageMaker SDK v2's `TensorFlow` estimator in local mode, as in the README: 2 instances of the CPU
image, the source folder mounted (`local_code`), file:// channels and output (sdk_local_mode.py: the real
SDK, no AWS account, no network beyond the local Docker engine). The SDK names its hosts
algo-1-<suffix>, algo-2-<suffix>.

- `distribution={"mpi": …}`: 4 Horovod ranks over both hosts with identical weights, and the dummy
  credentials the SDK puts in the containers are not forwarded to the ranks;
- `distribution={"multi_worker_mirrored_strategy": …}`: Keras 3 `fit` on one worker per host, with
  identical weights (the test harness beside the script writes them).
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest
from cluster import CASES, write_regression_csv
from harness import assert_workers_identical, code_with_harness, harness_env
from sdk_local_mode import (
    REPO,
    SDK_NETWORK,
    SDK_V2,
    SdkRun,
    assert_ranks_spread_with_identical_weights,
    local_mode_project,
    run_sdk_job,
    sdk_python,
)

# Both SDKs' local mode put their hosts on the one network named sagemaker-local, and each SDK's
# virtualenv is made once: their tests run on one pytest-xdist worker, one after the other.
pytestmark = [pytest.mark.container, pytest.mark.timeout(900), pytest.mark.xdist_group(SDK_NETWORK)]

HERE = Path(__file__).resolve().parent
JOB_SCRIPT = HERE / "sdk_v2_estimator_job.py"
JOB_SECONDS = 600
# The image's TensorFlow and Python, as the estimator's framework_version and py_version.
TF_VERSION = re.search(r"^tensorflow==(\d+\.\d+)", (REPO / "container/pins/python.txt").read_text(), re.M)
PYTHON_VERSION = re.search(
    r"^runtime +python3 +(\d+)\.(\d+)", (REPO / "container/pins/debian.txt").read_text(), re.M
)


@pytest.fixture(scope="module")
def sdk() -> Path:
    return sdk_python(SDK_V2)


def fit(
    sdk: Path, docker_client, tmp_path: Path, image: str, source_dir: Path, **fields
) -> tuple[SdkRun, Path]:
    """Run the estimator's `fit`; its run, and the job's output data (output.tar.gz, unpacked)."""
    assert TF_VERSION is not None and PYTHON_VERSION is not None
    output = tmp_path / "output"
    output.mkdir()
    job = {
        "image": image,
        "hosts": 2,
        "entry_point": "train.py",
        "source_dir": str(source_dir),
        "framework_version": TF_VERSION.group(1),
        "py_version": f"py{PYTHON_VERSION.group(1)}{PYTHON_VERSION.group(2)}",
        "output_path": output.as_uri(),
        "channels": {"train": str(write_regression_csv(tmp_path / "train", rows=256))},
        "hyperparameters": {},
        "environment": {},
        **fields,
    }
    with local_mode_project(docker_client) as project:
        run = run_sdk_job(sdk, JOB_SCRIPT, job, project, tmp_path, JOB_SECONDS)
    assert run.exit_code == 0, run.describe()
    with tarfile.open(output / "output.tar.gz") as archive:
        archive.extractall(tmp_path / "job-output", filter="data")
    return run, tmp_path / "job-output" / "data"


def test_the_estimator_with_mpi_distribution_trains_on_two_hosts(tmp_path, cpu_image, docker_client, sdk):
    run, data = fit(
        sdk, docker_client, tmp_path, cpu_image, CASES / "hvd_script",
        distribution={"mpi": {"enabled": True, "processes_per_host": 2}}, hyperparameters={"epochs": 2},
        container_log_level=10,  # DEBUG: the whole mpirun command is logged
    )  # fmt: skip
    hosts = assert_ranks_spread_with_identical_weights(data, 2, per_host=2)
    assert [host.rsplit("-", 1)[0] for host in hosts] == ["algo-1", "algo-1", "algo-2", "algo-2"], hosts
    # The SDK gives every container its (here dummy) credentials; mpirun must not hand them to the ranks.
    mpirun = [line for line in run.output.splitlines() if "mpirun command:" in line]
    assert len(mpirun) == 1, run.describe()
    assert "AWS_ACCESS_KEY_ID" not in mpirun[0] and "AWS_SECRET_ACCESS_KEY" not in mpirun[0], mpirun[0]


def test_the_estimator_with_multi_worker_mirrored_trains_keras_3_fit(tmp_path, cpu_image, docker_client, sdk):
    code = code_with_harness(tmp_path, "mwms_keras3_fit")
    _, data = fit(
        sdk, docker_client, tmp_path, cpu_image, code,
        distribution={"multi_worker_mirrored_strategy": {"enabled": True}}, environment=harness_env(),
    )  # fmt: skip
    assert_workers_identical(data, 2)
