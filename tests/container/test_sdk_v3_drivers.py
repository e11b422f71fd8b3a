"""The SageMaker SDK v3's own container drivers (ModelTrainer with SourceCode), run as the SDK runs them:
its sm_train.sh as the entrypoint, its drivers in the channel sm_drivers, two hosts algo-1 and algo-2 on an
internal network, resourceconfig.json naming the interface SDK v3 local mode names (ethwe, absent here).

- SourceCode alone: the image's launcher takes over from the SDK's script driver and distributes the job
  as the sagemaker_* hyperparameters ask: 4 ranks, identical weights.
- SourceCode + distributed=MPI(): the SDK's MPI driver (its sshd, paramiko, ssh and mpirun) works with the
  ssh keys each host makes at random and the hosts exchange through the coordinator's handshake: 4 ranks,
  identical weights, whether the job asks for 2 processes per node (the image's mpirun runs 2 on each
  host) or for all 4 placed with --map-by; a launch that still puts every rank on one host fails at once,
  saying what to do.
- Those keys let the job's hosts in and no one else: an outsider that knows the job's description but not
  its secret (a channel file) joins no exchange and logs in with no key derived from the description.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
from cluster import CASES, write_regression_csv
from conftest import TEST_LABEL, run_in_image
from localcluster.dockercli import DockerError
from sagetrain.config.channels import Channel
from sagetrain.config.job_files import JobFiles
from sagetrain.config.job_secret import CHANNEL_KEY
from sagetrain.deadline import Deadline
from sagetrain.sdk.mpirun import CORRECTED
from sdk_v3_package import SdkDrivers, fetch_sdk_drivers

HOSTS = ("algo-1", "algo-2")
# Under pytest-xdist, one worker runs the module: its fixture fetches the SDK's drivers once.
pytestmark = pytest.mark.xdist_group("sdk-v3-drivers")
SM_TRAIN = "/opt/ml/input/data/sm_drivers/sm_train.sh"
ENTRYPOINT = ["/bin/bash", "-c", f"chmod +x {SM_TRAIN} && {SM_TRAIN}"]
JOB_SECONDS = 420


@pytest.fixture(scope="module")
def sdk(tmp_path_factory) -> SdkDrivers:
    return fetch_sdk_drivers(tmp_path_factory.mktemp("sagemaker-train"))


def write_host(
    root: Path, host: str, sdk: SdkDrivers, mpi: bool, hyperparameters: dict, distributed: dict,
    secret: bytes | None = None,
) -> None:  # fmt: skip
    """One host's /opt/ml tree as SDK v3 local mode writes it for ModelTrainer(source_code=…); with
    ``secret``, a channel ``secret`` holding it in a file."""
    channels = (Channel("train"), Channel("code"), Channel("sm_drivers"))
    JobFiles(
        HOSTS, hyperparameters, channels=(*channels, Channel("secret")) if secret else channels,
        network_interface="ethwe",
    ).write(root, host)  # fmt: skip
    data = root / "input" / "data"
    if secret:
        (data / "secret" / "job-secret").write_bytes(secret)
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
            try:
                code = int(docker_client.run(["wait", names[host]], deadline))
            except DockerError as error:
                logs = "\n".join(f"--- {h}\n{docker_client.logs(n)[-4000:]}" for h, n in names.items())
                pytest.fail(f"{error}\n{logs}")
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


def test_the_sdk_mpi_driver_trains_across_hosts_with_the_keys_its_hosts_made(
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
    # The keys are exchanged once, though the driver's interpreter runs the image's .pth hook twice.
    assert results["algo-1"][1].count("to send its ssh keys") == 1, results["algo-1"][1][-4000:]


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


EXCHANGE = "import os; from sagetrain.sdk import ssh; ssh.prepare_for_mpi_driver(os.environ)"
# As the SDK's MPI driver starts sshd: from the process the image prepared, with its environment.
EXCHANGE_THEN_SSHD = f"{EXCHANGE}; os.execv('/usr/sbin/sshd', ['/usr/sbin/sshd', '-D', '-e'])"
SECRET = b"3a9e41c0 the job's secret, in a channel file 7f02"
CONTAINER_SECONDS = 180


def start_container(docker_client, image, network, name, host, tree: Path, script: str) -> None:
    args = ["run", "--detach", "--pull", "never", "--name", name, "--label", f"{TEST_LABEL}=1"]
    args += ["--network", network, "--network-alias", host, "--env", "TRAINING_JOB_NAME=job-a"]
    args += ["--volume", f"{tree / 'input'}:/opt/ml/input", "--entrypoint", "bash", image, "-c", script]
    docker_client.run(args)


def wait_for_line(docker_client, container: str, text: bytes) -> None:
    """Until the container's log has ``text`` (followed as it is written)."""
    deadline = Deadline(CONTAINER_SECONDS, f"{container} to say {text.decode()!r}")
    with docker_client.start(["logs", "--follow", container], deadline) as follower:
        for line in follower.stdout:
            if text in line:
                return
    pytest.fail(
        f"{container} ended without saying {text.decode()!r}: {docker_client.logs(container)[-3000:]}"
    )


def let_go(container: str, fifo: Path) -> None:
    """Let ``container``, reading ``fifo`` in its script, go on; fail if nothing reads it any more."""
    try:
        descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as error:
        if error.errno != errno.ENXIO:
            raise
        pytest.fail(f"{container} no longer waits on {fifo.name}: it ended")
    with os.fdopen(descriptor, "w") as writer:
        writer.write("go\n")


def outsider(docker_client, image, network, tree: Path, args: list[str]) -> dict:
    """cases/attacker/attack.py, knowing the job's configuration files (not its channels' data)."""
    result = run_in_image(
        docker_client, image, ["/attack/attack.py", *args], timeout_s=CONTAINER_SECONDS,
        volumes={str(tree / "input" / "config"): {"bind": "/attacker/ml/input/config", "mode": "ro"},
                 str(CASES / "attacker"): {"bind": "/attack", "mode": "ro"}},
        network=network, entrypoint=["python"],
    )  # fmt: skip
    assert "ATTACK " in result.output, result.output
    return json.loads(result.output.split("ATTACK ", 1)[1])


@pytest.mark.parametrize("members_only", [True, False], ids=["members-only-ports", "open-ports"])
def test_only_the_job_hosts_log_in_with_the_keys_they_made_and_exchanged(
    cpu_image, docker_client, internal_network, tmp_path, sdk, members_only
):
    """The job's secret is a channel file. algo-1 and algo-2 make their keys and exchange them as before
    the SDK's MPI driver; algo-2 then runs the system sshd as the driver does, algo-1 logs in to it. An
    outsider that knows the job's whole description, its name included, but not the secret, tries first: it
    neither joins the exchange as algo-2 nor logs in. With members-only ports (the default) sshd resets its
    connection before saying a word; without them, sshd refuses every key derived from the description."""
    hyperparameters = {"epochs": 2, CHANNEL_KEY: "secret", "sagetrain_members_only_ports": members_only}
    for host in HOSTS:
        write_host(tmp_path / host, host, sdk, True, hyperparameters, {}, secret=SECRET)
    names = {host: f"sagetrain-test-ssh-{uuid.uuid4().hex[:8]}-{host}" for host in HOSTS}
    login = "ssh -o BatchMode=yes -o ConnectionAttempts=60 algo-2 echo logged-in-as-member"
    go = tmp_path / "algo-2" / "input" / "go"
    os.mkfifo(go)
    try:
        start_container(
            docker_client, cpu_image, internal_network, names["algo-1"], "algo-1", tmp_path / "algo-1",
            # It stays up, as the job's master would: a container that ended gives its address up to the
            # next one the network starts (the outsider).
            f'python -c "{EXCHANGE}" && {login} && exec sleep {CONTAINER_SECONDS}',
        )  # fmt: skip
        wait_for_line(docker_client, names["algo-1"], b"waiting for algo-2 to send its ssh keys")
        # algo-2 holds its address from before the outsider starts until the end: started after the
        # outsider ended, it could take the outsider's address, and a refusal of the outsider's that the
        # master reads late would then be algo-2's (the claim rests on the address, as
        # launch/coordinator/server.py says under "Mismatched keys").
        start_container(
            docker_client, cpu_image, internal_network, names["algo-2"], "algo-2", tmp_path / "algo-2",
            f'echo waiting-to-exchange && read -r _ < /opt/ml/input/go && python -c "{EXCHANGE_THEN_SSHD}"',
        )  # fmt: skip
        wait_for_line(docker_client, names["algo-2"], b"waiting-to-exchange")
        knows_all = ["guess", "--names", "job-a"]  # the job's name too
        guessed = outsider(docker_client, cpu_image, internal_network, tmp_path / "algo-2", knows_all)
        assert guessed["join"] == ["wrong"], guessed
        let_go(names["algo-2"], go)
        wait_for_line(docker_client, names["algo-1"], b"logged-in-as-member")
        logs = {host: docker_client.logs(name) for host, name in names.items()}
        attempt = outsider(
            docker_client, cpu_image, internal_network, tmp_path / "algo-2", ["ssh", "--names", "job-a"]
        )
        assert attempt["login_exit"] == 255, attempt
        if members_only:
            # ssh says "by peer" when the reset meets its banner exchange and "by <address> port 22" when
            # it meets ssh's packet layer; which one is a race, and either means sshd said nothing.
            assert "Connection reset by " in attempt["login_output"], attempt
            assert attempt["host_key"] == "", attempt  # not even sshd's banner
            assert "refused a connection from" in docker_client.logs(names["algo-2"])
        else:
            assert "Permission denied (publickey)" in attempt["login_output"], attempt
            known = docker_client.run(["exec", names["algo-2"], "cat", "/root/.ssh/known_hosts"])
            assert attempt["host_key"] and attempt["host_key"] in known  # what it sees is the host's own key
        assert "WARNING" not in logs["algo-1"] + logs["algo-2"]
        assert SECRET.decode() not in logs["algo-1"] + logs["algo-2"]
    finally:
        for name in names.values():
            docker_client.run(["rm", "--force", name], check=False)
