"""The SageMaker SDK v3's own container drivers (ModelTrainer with SourceCode), run as the SDK runs them:
its sm_train.sh as the entrypoint, its drivers in the channel sm_drivers, two hosts algo-1 and algo-2 on an
internal network, resourceconfig.json naming the interface SDK v3 local mode names (ethwe, absent here).

- SourceCode alone: the image's launcher takes over from the SDK's script driver and distributes the job
  as the sagemaker_* hyperparameters ask: 4 ranks, identical weights.
- SourceCode + distributed=MPI(): the SDK's MPI driver (its sshd, paramiko, ssh and mpirun) works with the
  ssh keys this image derives for the job: 4 ranks, identical weights, whether the job asks for 2
  processes per node (the image's mpirun runs 2 on each host) or for all 4 placed with --map-by; a launch
  that still puts every rank on one host fails at once, saying what to do.
- Those keys let the job's hosts in and no one else: a container holding another job's keys is refused.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from cluster import CASES, write_regression_csv
from conftest import TEST_LABEL, run_in_image
from sagetrain.config.channels import Channel
from sagetrain.config.job_files import JobFiles
from sagetrain.deadline import Deadline
from sagetrain.sdk.mpirun import CORRECTED
from sdk_v3_package import SdkDrivers, fetch_sdk_drivers

HOSTS = ("algo-1", "algo-2")
SM_TRAIN = "/opt/ml/input/data/sm_drivers/sm_train.sh"
ENTRYPOINT = ["/bin/bash", "-c", f"chmod +x {SM_TRAIN} && {SM_TRAIN}"]
JOB_SECONDS = 420


@pytest.fixture(scope="module")
def sdk(tmp_path_factory) -> SdkDrivers:
    return fetch_sdk_drivers(tmp_path_factory.mktemp("sagemaker-train"))


def write_host(
    root: Path, host: str, sdk: SdkDrivers, mpi: bool, hyperparameters: dict, distributed: dict
) -> None:
    """One host's /opt/ml tree as SDK v3 local mode writes it for ModelTrainer(source_code=…)."""
    JobFiles(
        HOSTS,
        hyperparameters,
        channels=(Channel("train"), Channel("code"), Channel("sm_drivers")),
        network_interface="ethwe",
    ).write(root, host)
    data = root / "input" / "data"
    shutil.copytree(sdk.drivers, data / "sm_drivers", dirs_exist_ok=True)
    (data / "sm_drivers" / "sm_train.sh").write_text(sdk.train_script(mpi))
    source_code = {"source_dir": "src", "entry_script": "train.py", "command": None, "requirements": None}
    (data / "sm_drivers" / "sourcecode.json").write_text(json.dumps(source_code))
    (data / "sm_drivers" / "distributed.json").write_text(json.dumps(distributed))
    shutil.copytree(CASES / "hvd_script", data / "code", dirs_exist_ok=True)
    write_regression_csv(data / "train", rows=256)


def run_sdk_job(docker_client, image, network, tmp_path, sdk, mpi, hyperparameters, distributed):
    """Both hosts started as the SDK starts them; their exit codes and output once both have ended."""
    job = f"sdk3-{uuid.uuid4().hex[:8]}"
    names = {host: f"sagetrain-test-{job}-{host}" for host in HOSTS}
    results = {}
    try:
        for host in HOSTS:
            root = tmp_path / host
            write_host(root, host, sdk, mpi, hyperparameters, distributed)
            volumes = [f"{root / part}:/opt/ml/{part}" for part in ("input", "output", "model")]
            args = ["create", "--pull", "never", "--name", names[host], "--label", f"{TEST_LABEL}=1"]
            args += ["--network", network, "--network-alias", host, "--shm-size", "1g"]
            args += [arg for volume in volumes for arg in ("--volume", volume)]
            args += [
                "--env",
                f"TRAINING_JOB_NAME={job}",
                "--entrypoint",
                ENTRYPOINT[0],
                image,
                *ENTRYPOINT[1:],
            ]
            docker_client.run(args)
        for host in HOSTS:
            docker_client.run(["start", names[host]])
        deadline = Deadline(JOB_SECONDS, "both hosts of the SDK v3 job to end", "raise JOB_SECONDS")
        for host in HOSTS:
            code = int(docker_client.run(["wait", names[host]], deadline))
            results[host] = (code, docker_client.logs(names[host]))
    finally:
        for name in names.values():
            docker_client.run(["rm", "--force", name], check=False)
    return results


def identities(tmp_path: Path) -> dict[int, dict]:
    found = {}
    for host in HOSTS:
        for path in (tmp_path / host / "output" / "data").glob("identity-rank-*.json"):
            identity = json.loads(path.read_text())
            found[identity["rank"]] = {**identity, "tree": host}
    return found


def assert_four_ranks_on_two_hosts_with_identical_weights(tmp_path: Path, results: dict) -> None:
    import numpy as np

    described = "\n".join(f"--- {host} exit {code}\n{log[-6000:]}" for host, (code, log) in results.items())
    assert {host: code for host, (code, _) in results.items()} == dict.fromkeys(HOSTS, 0), described
    ranks = identities(tmp_path)
    assert sorted(ranks) == [0, 1, 2, 3], described
    assert {rank: (r["size"], r["tree"], r["sm_current_host"]) for rank, r in ranks.items()} == {
        0: (4, "algo-1", "algo-1"),
        1: (4, "algo-1", "algo-1"),
        2: (4, "algo-2", "algo-2"),
        3: (4, "algo-2", "algo-2"),
    }
    weights = sorted(
        p for host in HOSTS for p in (tmp_path / host / "output/data").glob("rank-*-weights.npz")
    )
    assert len(weights) == 4, weights
    reference = np.load(weights[0])
    for path in weights[1:]:
        other = np.load(path)
        assert all(np.array_equal(reference[key], other[key]) for key in reference.files), path


MPI_HYPERPARAMETERS = {
    "sagemaker_mpi_enabled": True,
    "sagemaker_mpi_num_of_processes_per_host": 2,
    "epochs": 2,
}


def test_source_code_alone_runs_the_image_launcher_which_distributes_as_the_hyperparameters_ask(
    cpu_image, docker_client, internal_network, tmp_path, sdk
):
    results = run_sdk_job(
        docker_client, cpu_image, internal_network, tmp_path, sdk, False, MPI_HYPERPARAMETERS, {}
    )
    assert "the image's launcher runs the job instead" in results["algo-1"][1]
    assert_four_ranks_on_two_hosts_with_identical_weights(tmp_path, results)


def test_the_sdk_mpi_driver_trains_across_hosts_with_keys_derived_for_the_job(
    cpu_image, docker_client, internal_network, tmp_path, sdk
):
    """The README's explicit form: every rank asked for, placed 2 per host with --map-by; the image's
    mpirun leaves it as given."""
    distributed = {"process_count_per_node": 4, "mpi_additional_options": ["--map-by", "ppr:2:node"]}
    results = run_sdk_job(
        docker_client, cpu_image, internal_network, tmp_path, sdk, True, {"epochs": 2}, distributed
    )
    assert_four_ranks_on_two_hosts_with_identical_weights(tmp_path, results)
    assert "no hostkeys available" not in results["algo-1"][1] + results["algo-2"][1]
    assert CORRECTED.split("{")[0] not in results["algo-1"][1]  # nothing corrected


def test_process_count_per_node_means_that_many_ranks_on_every_host(
    cpu_image, docker_client, internal_network, tmp_path, sdk
):
    """MPI(process_count_per_node=2), as the SDK documents it: the driver gives mpirun -np 2 for the whole
    job, and the image's mpirun in front of it runs 2 on each host, saying so once."""
    distributed = {"process_count_per_node": 2, "mpi_additional_options": None}
    results = run_sdk_job(
        docker_client, cpu_image, internal_network, tmp_path, sdk, True, {"epochs": 2}, distributed
    )
    assert_four_ranks_on_two_hosts_with_identical_weights(tmp_path, results)
    said = CORRECTED.format(per_node=2, total=4, hosts=2)
    assert results["algo-1"][1].count(said) == 1, results["algo-1"][1][-4000:]


def test_ranks_a_job_still_puts_on_one_host_of_several_fail_at_once_saying_what_to_do(
    cpu_image, docker_client, internal_network, tmp_path, sdk
):
    """A launch the image leaves as given (it places its ranks: 2 per node) that asks for only 2 ranks
    in all: both land on algo-1, and the job fails at once instead of training one host's share."""
    distributed = {"process_count_per_node": 2, "mpi_additional_options": ["--map-by", "ppr:2:node"]}
    results = run_sdk_job(
        docker_client, cpu_image, internal_network, tmp_path, sdk, True, {"epochs": 2}, distributed
    )
    code, log = results["algo-1"]
    failure = (tmp_path / "algo-1" / "output" / "failure").read_text()
    assert code != 0, log[-4000:]
    assert failure.startswith(
        "the SageMaker SDK's MPI driver started all 2 ranks on one of the job's 2 hosts"
    ), failure
    assert not list((tmp_path / "algo-1" / "output" / "data").glob("identity-rank-*.json"))


PREPARE = "import os; from sagetrain.sdk import ssh; ssh.prepare_for_mpi_driver(os.environ)"
SSHD_START_SECONDS = 120


def wait_for_sshd(docker_client, container: str) -> None:
    """Until the container's sshd says it listens (its log, followed as it is written)."""
    deadline = Deadline(SSHD_START_SECONDS, f"sshd in {container} to listen")
    with docker_client.start(["logs", "--follow", container], deadline) as follower:
        for line in follower.stdout:
            if b"Server listening on" in line:
                return
    pytest.fail(f"sshd in {container} ended or did not listen within {SSHD_START_SECONDS} s")


def test_only_a_host_holding_the_job_keys_logs_in(cpu_image, docker_client, internal_network, tmp_path, sdk):
    """algo-2 runs the system sshd as the SDK's driver starts it; a member of the job logs in, a container
    that derived the keys of another job (same files, other job name) and one with no key are refused."""
    for host in HOSTS:
        write_host(tmp_path / host, host, sdk, True, {"epochs": 2}, {})
    server = f"sagetrain-test-sshd-{uuid.uuid4().hex[:8]}"
    args = ["run", "--detach", "--pull", "never", "--name", server, "--label", f"{TEST_LABEL}=1"]
    args += ["--network", internal_network, "--network-alias", "algo-2", "--env", "TRAINING_JOB_NAME=job-a"]
    args += ["--volume", f"{tmp_path / 'algo-2' / 'input'}:/opt/ml/input", "--entrypoint", "bash", cpu_image]
    docker_client.run([*args, "-c", f'python -c "{PREPARE}" && exec /usr/sbin/sshd -D -e'])
    try:
        wait_for_sshd(docker_client, server)

        def login(job_name: str, prepare: bool) -> tuple[int, str]:
            # A member checks algo-2's host key against its known_hosts; the others accept any host key,
            # so what refuses them is the login itself.
            options = "-o BatchMode=yes -o ConnectTimeout=5"
            if job_name != "job-a" or not prepare:
                options += " -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
            script = (f'python -c "{PREPARE}" && ' if prepare else "") + (
                f"ssh {options} algo-2 echo logged-in-as-member"
            )
            result = run_in_image(
                docker_client,
                cpu_image,
                ["-c", script],
                timeout_s=120,
                volumes={str(tmp_path / "algo-1" / "input"): {"bind": "/opt/ml/input"}},
                environment={"TRAINING_JOB_NAME": job_name},
                network=internal_network,
                entrypoint=["bash"],
            )
            return result.exit_code, result.output

        member = login("job-a", prepare=True)
        assert member[0] == 0 and "logged-in-as-member" in member[1], member[1]
        for job_name, prepare in (("job-b", True), ("job-a", False)):
            code, output = login(job_name, prepare)
            assert code == 255 and "Permission denied (publickey)" in output, output
            assert "logged-in-as-member" not in output, output
    finally:
        docker_client.run(["rm", "--force", server], check=False)
