"""The SageMaker SDK v3's own `ModelTrainer`, in local-container mode, with 2 instances of the CPU image
(sdk_local_mode.py: the real SDK, no AWS account, no network beyond the local Docker engine). Each case
asserts 4 ranks (or 2 workers) spread over both hosts and identical weights:

- `SourceCode` + `distributed=MPI()`: the SDK's MPI driver, with the ssh keys each host makes and the
  hosts exchange, the job's secret in a channel file;
- `SourceCode` alone: the image's launcher takes over from the SDK's script driver and distributes as
  the sagemaker_* hyperparameters ask, Horovod and MultiWorkerMirroredStrategy (Keras 3 `fit`);
- no `SourceCode`: `sagemaker_program` and `sagemaker_submit_directory` as hyperparameters;
- `SourceCode(command=…)` with hyperparameters asking for MPI fails at once, saying what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
from cluster import CASES, write_regression_csv
from harness import assert_workers_identical, code_with_harness, harness_env
from localcluster.dockercli import DockerCli
from sagetrain.config.job_secret import CHANNEL_KEY
from sdk_local_mode import (
    SDK_NETWORK,
    SDK_V3,
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
JOB_SCRIPT = HERE / "sdk_v3_trainer_job.py"
HOSTS = ("algo-1", "algo-2")
JOB_SECONDS = 600
# SDK v3's folder for the SourceCode's source_dir inside the container (the channel `code`).
CODE_IN_CONTAINER = "/opt/ml/input/data/code"
MPI_HYPERPARAMETERS = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2}
SECRET = b"5c1d7e22 the job's secret, in a channel file a04b"


@dataclass(frozen=True)
class TrainerJob:
    """What the SDK-side script (sdk_v3_trainer_job.py) builds its ModelTrainer from."""

    image: str
    root: str  # ModelTrainer's local_container_root
    name: str
    source_code: dict | None  # SourceCode(**source_code)
    mpi: dict | None  # distributed=MPI(**mpi)
    hyperparameters: dict
    channels: dict[str, str]
    environment: dict[str, str] = field(default_factory=dict)
    hosts: int = len(HOSTS)

    @property
    def output_data(self) -> Path:
        """Every host's /opt/ml/output/data, merged by the SDK after the job."""
        return Path(self.root) / "artifacts" / "output" / "data"

    @property
    def model(self) -> Path:
        return Path(self.root) / "artifacts" / "model"


def assert_four_ranks_on_algo_1_and_algo_2(job: TrainerJob) -> None:
    hosts = assert_ranks_spread_with_identical_weights(job.output_data, len(HOSTS), per_host=2)
    assert hosts == ["algo-1", "algo-1", "algo-2", "algo-2"]


@pytest.fixture(scope="module")
def sdk() -> Path:
    return sdk_python(SDK_V3)


@pytest.fixture
def project(docker_client: DockerCli) -> Iterator[str]:
    with local_mode_project(docker_client) as name:
        yield name


def new_job(tmp_path: Path, image: str, extra_channels: dict[str, str] | None = None, **fields) -> TrainerJob:
    root = tmp_path / "root"
    root.mkdir()
    channels = {"train": str(write_regression_csv(tmp_path / "train", rows=256)), **(extra_channels or {})}
    return TrainerJob(image=image, root=str(root), name="sdk3-trainer", channels=channels, **fields)


def train(sdk: Path, project: str, tmp_path: Path, job: TrainerJob) -> SdkRun:
    return run_sdk_job(sdk, JOB_SCRIPT, asdict(job), project, tmp_path, JOB_SECONDS)


def test_source_code_with_the_sdk_mpi_driver_trains_on_both_hosts(tmp_path, cpu_image, sdk, project):
    """With the job's secret given as the README recommends (a file in a channel the hyperparameter
    names): the script, which takes only the arguments it knows, runs on every rank, and the secret is
    on no line of the job's output."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "job-secret").write_bytes(SECRET)
    job = new_job(
        tmp_path, cpu_image,
        source_code={"source_dir": str(CASES / "hvd_script"), "entry_script": "train.py"},
        mpi={"process_count_per_node": 4, "mpi_additional_options": ["--map-by", "ppr:2:node"]},
        hyperparameters={"epochs": 2, CHANNEL_KEY: "secret"}, extra_channels={"secret": str(secret)},
    )  # fmt: skip
    run = train(sdk, project, tmp_path, job)
    assert run.exit_code == 0 and "Running MPI Driver" in run.output, run.describe()
    assert_four_ranks_on_algo_1_and_algo_2(job)
    assert (job.model / "model.keras").is_file(), run.describe()
    assert f"--{CHANNEL_KEY}" not in run.output  # not on the script's command line, which the driver logs
    assert SECRET.decode() not in run.output
    assert "no job secret" not in run.output


def test_source_code_alone_is_distributed_by_the_image_launcher(tmp_path, cpu_image, sdk, project):
    job = new_job(
        tmp_path, cpu_image,
        source_code={"source_dir": str(CASES / "hvd_script"), "entry_script": "train.py"},
        mpi=None, hyperparameters={**MPI_HYPERPARAMETERS, "epochs": 2},
    )  # fmt: skip
    run = train(sdk, project, tmp_path, job)
    assert run.exit_code == 0, run.describe()
    assert "the image's launcher runs the job instead" in run.output, run.describe()
    assert_four_ranks_on_algo_1_and_algo_2(job)


def test_hyperparameters_naming_the_program_run_the_image_launcher(tmp_path, cpu_image, sdk, project):
    """No SourceCode: the SDK keeps the image's entrypoint (its launcher, which logs its plan) and mounts a
    file:// submit directory."""
    job = new_job(
        tmp_path, cpu_image, source_code=None, mpi=None,
        hyperparameters={
            **MPI_HYPERPARAMETERS, "epochs": 2, "sagemaker_program": "train.py",
            "sagemaker_submit_directory": (CASES / "hvd_script").as_uri(),
        },
    )  # fmt: skip
    run = train(sdk, project, tmp_path, job)
    assert run.exit_code == 0 and "plan: engine=horovod" in run.output, run.describe()
    assert_four_ranks_on_algo_1_and_algo_2(job)


def test_source_code_alone_trains_keras_3_fit_under_multi_worker_mirrored(tmp_path, cpu_image, sdk, project):
    """The common Keras 3 recipe (MultiWorkerMirroredStrategy, `fit`) with the test harness beside it in
    the source folder, which writes each worker's final weights."""
    code = code_with_harness(tmp_path, "mwms_keras3_fit")
    job = new_job(
        tmp_path, cpu_image,
        source_code={"source_dir": str(code), "entry_script": "train.py"}, mpi=None,
        hyperparameters={"sagemaker_multi_worker_mirrored_strategy_enabled": True},
        environment=harness_env(CODE_IN_CONTAINER),
    )  # fmt: skip
    run = train(sdk, project, tmp_path, job)
    assert run.exit_code == 0, run.describe()
    assert_workers_identical(job.output_data, len(HOSTS))


def test_a_command_with_mpi_hyperparameters_fails_saying_what_to_do(tmp_path, cpu_image, sdk, project):
    """The SDK runs a command once per host, which would train one unconnected model per host."""
    job = new_job(
        tmp_path, cpu_image,
        source_code={"source_dir": str(CASES / "hvd_script"), "command": "python train.py --epochs 2"},
        mpi=None, hyperparameters=MPI_HYPERPARAMETERS,
    )  # fmt: skip
    run = train(sdk, project, tmp_path, job)
    assert run.exit_code != 0, run.describe()
    refusal = "sagetrain: SourceCode(command=...) runs its command once on each host"
    assert refusal in run.output, run.describe()
    assert not list(job.output_data.glob("identity-rank-*.json")), run.describe()
