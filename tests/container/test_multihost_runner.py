"""scripts/local-cluster's own behaviour, with a stand-in `train` so each case takes seconds: SageMaker
names and trees per host, the local-mode verdict, every host's exit code, start delays, the job timeout,
Ctrl-C, output collection and cleanup. The real image's jobs are in the other test_multihost_* files."""

import json
import os
import re
import signal
import subprocess
import textwrap
import uuid

import pytest
from cluster import CASES, DOCKER, leftovers, run_cluster, start_cluster
from sagetrain.deadline import Deadline

DOUBLE_TAG = "sagetrain-test/local-cluster-double:1"
# One pytest-xdist worker builds the stand-in image, once for the module.
pytestmark = [pytest.mark.container, pytest.mark.timeout(180), pytest.mark.xdist_group(DOUBLE_TAG)]


@pytest.fixture(scope="module")
def double_image():
    """The stand-in is built on debian:bookworm-slim (the image's own base, present wherever the image
    was built); the build takes a second and needs no network."""
    base = "debian:bookworm-slim"
    DOCKER.run(["image", "inspect", base])
    DOCKER.run(
        [
            "build",
            "--quiet",
            "--build-arg",
            f"BASE={base}",
            "--tag",
            DOUBLE_TAG,
            str(CASES / "runner_double"),
        ],
        Deadline(120, "the stand-in image to build", "check that the Docker engine answers (`docker info`)"),
    )
    return DOUBLE_TAG


def behaviour(tmp_path, script):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "behaviour.sh").write_text(textwrap.dedent(script))
    return code


def test_each_host_is_algo_i_with_its_own_tree_and_finds_the_others(tmp_path, double_image):
    code = behaviour(
        tmp_path,
        """
        for peer in algo-1 algo-2 algo-3; do
          getent hosts "$peer" >/dev/null && echo "resolved $peer"
        done
        grep -e '"epochs"' -e '"optimizer"' /opt/ml/input/config/hyperparameters.json | tr -d ' '
        ls /opt/ml/input/data/train
        echo "weights of $host" > /opt/ml/model/weights.txt
        echo "$host" > /opt/ml/output/data/host.txt
        """,
    )
    data = tmp_path / "data"
    data.mkdir()
    (data / "records.csv").write_text("1,2\n")
    result = run_cluster(
        tmp_path, double_image, 3, code, program="behaviour.sh",
        hyperparameters={"epochs": 3, "optimizer": "adam"}, channels={"train": data},
        extra=["--grace", "30"], timeout=120,
    )  # fmt: skip
    assert result.exit_code == 0, result.describe()
    assert result.exit_codes() == {"algo-1": 0, "algo-2": 0, "algo-3": 0}
    for host in result.hosts:
        lines = result.host_lines(host)
        # The hostname is the container's id, as in SageMaker local mode.
        started = [line for line in lines if line.startswith(f"started host={host} hostname=")]
        assert len(started) == 1 and re.fullmatch(r".*hostname=[0-9a-f]{12}", started[0]), lines
        # A host resolves itself at least; all three once they are up (they start together).
        assert f"resolved {host}" in lines
        assert '"epochs":"3",' in lines
        assert '"optimizer":"\\"adam\\""' in lines
        assert "records.csv" in lines
        assert (result.tree(host) / "output/data/host.txt").read_text().strip() == host
        config = json.loads((result.tree(host) / "input/config/resourceconfig.json").read_text())
        assert config["current_host"] == host
        assert config["hosts"] == ["algo-1", "algo-2", "algo-3"]
    assert (result.output / "model" / "weights.txt").read_text().strip() == "weights of algo-1"
    assert (result.output / "output" / "data" / "host.txt").read_text().strip() == "algo-1"
    assert (result.output / "logs" / "algo-2.log").read_text().startswith("started host=algo-2")


def test_first_exit_is_the_verdict_and_the_others_are_stopped(tmp_path, double_image):
    code = behaviour(
        tmp_path,
        """
        if [ "$host" = algo-2 ]; then echo "failing on purpose"; exit 7; fi
        echo "$host waiting"
        sleep 600 &
        wait
        """,
    )
    result = run_cluster(tmp_path, double_image, 2, code, program="behaviour.sh", timeout=120)
    assert result.exit_code == 7, result.describe()
    assert result.summary["first_host"] == "algo-2"
    assert result.exit_codes() == {"algo-1": 143, "algo-2": 7}
    assert result.host("algo-1")["stopped_by_runner"] is True
    assert "algo-1 got SIGTERM" in result.host_lines("algo-1")


def test_a_delayed_host_starts_later_and_a_pending_one_never_starts(tmp_path, double_image):
    code = behaviour(
        tmp_path,
        """
        echo "clock $(date +%s.%N)"
        if [ "$host" = algo-1 ]; then
          until getent hosts algo-2 >/dev/null; do echo "algo-2 not up yet"; done
          echo "algo-2 is up"
        else
          sleep 600 &
          wait
        fi
        """,
    )
    result = run_cluster(
        tmp_path, double_image, 3, code, program="behaviour.sh",
        extra=["--start-delay", "algo-2=3", "--start-delay", "algo-3=3600"], timeout=120,
    )  # fmt: skip
    assert result.exit_code == 0, result.describe()
    assert result.host_lines("algo-1")[-1] == "algo-2 is up"
    clocks = {
        host: float(next(line for line in result.host_lines(host) if line.startswith("clock ")).split()[1])
        for host in ("algo-1", "algo-2")
    }
    # algo-2 started well after algo-1. Not the full 3 s: the delay counts from when the runner starts
    # algo-1, whose own start-up (container, entry) comes before its clock line and took 0.6 s more than
    # algo-2's once on a loaded machine (a 2.38 s gap).
    assert clocks["algo-2"] - clocks["algo-1"] >= 1.5, clocks
    assert result.summary["first_host"] == "algo-1"
    assert result.host("algo-2")["exit_code"] == 143
    assert result.host("algo-3")["state"] == "never_started"
    assert result.host("algo-3")["exit_code"] is None


def test_timeout_stops_every_host_and_exits_124(tmp_path, double_image):
    code = behaviour(tmp_path, "sleep 600 &\nwait\n")
    result = run_cluster(tmp_path, double_image, 2, code, program="behaviour.sh", timeout=5)
    assert result.exit_code == 124, result.describe()
    assert result.exit_codes() == {"algo-1": 143, "algo-2": 143}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_the_hosts_and_removes_everything(tmp_path, double_image, signum):
    code = behaviour(tmp_path, 'echo "$host sleeping"\nsleep 600 &\nwait\n')
    with start_cluster(tmp_path, double_image, 2, code, program="behaviour.sh", timeout=120) as running:
        running.wait_for_line(r"sleeping", timeout=60, host="algo-2")
        running.wait_for_line(r"sleeping", timeout=60, host="algo-1")
        running.process.send_signal(signum)
        result = running.wait()  # asserts nothing is left behind
    assert result.exit_code == 128 + signum, result.describe()
    assert result.exit_codes() == {"algo-1": 143, "algo-2": 143}
    assert not leftovers(result.job_name)


def test_temporary_trees_are_removed_unless_kept(tmp_path, double_image):
    code = behaviour(tmp_path, "true\n")
    runner = CASES.parents[2] / "scripts" / "local-cluster"
    completed = subprocess.run(
        [str(runner), "--image", double_image, "--hosts", "1", "--code", str(code),
         "--program", "behaviour.sh", "--output", str(tmp_path / "out"), "--timeout", "60"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    summary = json.loads((tmp_path / "out" / "cluster-summary.json").read_text())
    assert summary["workdir"] is None
    first_line = completed.stdout.splitlines()[0]
    trees = first_line.rsplit("trees in ", 1)[1]
    assert not (tmp_path / trees).exists()
    assert not leftovers(summary["job_name"])


def run_runner(tmp_path, *flags):
    """The runner in the foreground, with its temporary folders under tmp_path/tmp."""
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    code = behaviour(tmp_path, "true\n")
    runner = CASES.parents[2] / "scripts" / "local-cluster"
    completed = subprocess.run(
        [str(runner), "--hosts", "2", "--code", str(code), "--program", "behaviour.sh",
         "--output", str(tmp_path / "out"), "--timeout", "60", *flags],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(temp)},
    )  # fmt: skip
    return completed, temp


def test_an_image_that_is_not_here_is_named_and_never_pulled(tmp_path):
    absent = "sagetrain-test/never-built:0"
    completed, temp = run_runner(tmp_path, "--image", absent, "--job-name", "t-absent-image")
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert completed.stderr.strip() == (
        f"local-cluster: --image {absent} is not on this machine and local-cluster does not pull; build it "
        f"(scripts/build.sh cpu) or pull it (docker pull {absent}), then run again."
    )
    assert list(temp.iterdir()) == [], "host trees were written for a job that cannot start"
    assert DOCKER.image_id(absent) is None
    assert not leftovers("t-absent-image")


def test_a_job_name_already_in_use_is_refused_and_what_uses_it_is_left_alone(tmp_path, cpu_image):
    job = f"t-in-use-{uuid.uuid4().hex[:8]}"
    DOCKER.run(["network", "create", "--internal", "--label", "sagetrain.test=1", f"{job}-net"])
    try:
        completed, temp = run_runner(tmp_path, "--image", cpu_image, "--job-name", job)
        assert completed.returncode == 2, completed.stdout + completed.stderr
        assert f"--job-name {job} is already taken by network {job}-net; choose" in completed.stderr
        assert list(temp.iterdir()) == []
        assert DOCKER.run(["network", "inspect", "--format", "{{.Name}}", f"{job}-net"]) == f"{job}-net"
    finally:
        DOCKER.run(["network", "rm", f"{job}-net"], check=False)
