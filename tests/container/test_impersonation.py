"""Outsiders on a job's network while the real job runs (MPI, 2 hosts, algo-2 starting late so that the
outsiders come first), each in a container of its own running cases/attacker/attack.py:

- without a job secret, one that knows the job's hyperparameters and channels but not its name guesses
  names, one connection per guess, trying to join as algo-2 and to report rank 0 failed; another floods the
  master's coordinator (1,100 connections, with the hosts' open-files limit at 1024), sends one byte every
  4 s, deeply nested JSON and an overlong line. The job succeeds; no guess joins or reports; the guesses the
  master answered are rate-limited; the flood's slow and malformed connections are dropped within the
  handshake's deadline, without a traceback; the master logs one line per outsider and a count.
- with a secret in a channel file, one that knows all of the job's description, its name included, is
  refused the same way.
"""

import json

import pytest
from cluster import CASES, files_by_host, outsider, outsider_alongside, start_cluster
from sagetrain.config.job_secret import CHANNEL_KEY
from sagetrain.launch.coordinator.server import HANDSHAKE_SECONDS
from sagetrain.launch.coordinator.trust import FAILURES_BEFORE_PAUSE, PAUSE_SECONDS

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

AWS_SECRET = "aws-secret-of-the-job-0123456789"
# At log level DEBUG (10) the master logs the whole mpirun command, which the tests read.
MPI = {
    "sagemaker_mpi_enabled": True,
    "sagemaker_mpi_num_of_processes_per_host": 1,
    "sagemaker_container_log_level": 10,
}


def start_job(tmp_path, image, name, **kwargs):
    running = start_cluster(
        tmp_path, image, 2, CASES / "credentials", name=name, program="train.py",
        env={"AWS_SECRET_ACCESS_KEY": AWS_SECRET}, timeout=400, **kwargs,
    )  # fmt: skip
    running.wait_for_line(r"waiting for algo-2 to join", timeout=120, host="algo-1")
    return running


def assert_the_job_is_its_own(result) -> None:
    assert result.exit_code == 0, result.describe()
    assert set(result.exit_codes().values()) == {0}, result.describe()
    master_lines = "\n".join(result.host_lines("algo-1"))
    assert "cancelled by the admin" not in (result.failure("algo-1") or "") + master_lines
    assert "Traceback" not in master_lines
    mpirun_line = next(line for line in result.host_lines("algo-1") if "mpirun command:" in line)
    assert "AWS_SECRET_ACCESS_KEY" not in mpirun_line and AWS_SECRET not in mpirun_line
    records = [
        json.loads(p.read_text())
        for ps in files_by_host(result, "credentials-rank-*.json").values()
        for p in ps
    ]
    # Each rank has its own host's credentials (the real worker's came from that host, not over mpirun).
    assert sorted((record["rank"], record["host"], record["aws_secret"]) for record in records) == [
        (0, "algo-1", AWS_SECRET),
        (1, "algo-2", AWS_SECRET),
    ]


def test_guesses_floods_and_malformed_messages_leave_the_job_its_own(tmp_path, cpu_image):
    with start_job(
        tmp_path, cpu_image, "outsiders", hyperparameters=MPI,
        extra=["--start-delay", "algo-2=40", "--grace", "30", "--ulimit", "nofile=1024:1024"],
    ) as running:  # fmt: skip
        # The flood goes on until algo-2, starting late, has joined and mpirun has started every rank.
        with outsider_alongside(running, cpu_image, tmp_path, "flood", ["flood"], 600) as flooded:
            names = ",".join(f"{running.job_name[:-1]}{n}x" for n in range(12))  # near misses, never the name
            guessed = outsider(running, cpu_image, tmp_path, "guess", ["guess", "--names", names], 300)
            running.wait_for_line(r"mpirun command:", timeout=300, host="algo-1")
        result = running.wait()

    assert_the_job_is_its_own(result)
    outcomes = guessed["join"] + guessed["report"]
    assert "welcome" not in outcomes and "ack" not in outcomes, guessed
    tested = outcomes.count("wrong")  # guesses the master answered: each tested one guess, online
    assert 1 <= tested <= FAILURES_BEFORE_PAUSE * (1 + int(guessed["seconds"] // PAUSE_SECONDS)), guessed
    assert outcomes.count("unheard") == len(outcomes) - tested, guessed
    assert flooded["opened"] >= 1100, flooded
    for probe in ("slow", "deep", "long"):  # the slow line would take 4 minutes; all cut at the deadline
        assert flooded[probe] < HANDSHAKE_SECONDS + 5, flooded
    master_lines = result.host_lines("algo-1")
    refusals = [line for line in master_lines if "refused a coordinator connection from" in line]
    assert 1 <= len(refusals) <= 2, refusals  # one line for each outsider's address, at most
    assert any("the coordinator refused" in line and "connection(s)" in line for line in master_lines)
    for host in ("algo-1", "algo-2"):
        warnings = [line for line in result.host_lines(host) if "this 2-host job has no job secret" in line]
        assert len(warnings) == 1, result.host_lines(host)[:40]


def test_an_outsider_knowing_the_whole_description_but_not_the_channel_secret_is_refused(tmp_path, cpu_image):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "job-secret").write_bytes(b"b2f1c7e0 a secret the job's description does not show 93d4")
    with start_job(
        tmp_path, cpu_image, "secret", hyperparameters={**MPI, CHANNEL_KEY: "secret"},
        channels={"secret": secret}, extra=["--start-delay", "algo-2=15", "--grace", "30"],
    ) as running:  # fmt: skip
        knows_all = ["guess", "--names", running.job_name]
        guessed = outsider(running, cpu_image, tmp_path, "knows-all", knows_all, 120)
        result = running.wait()

    assert_the_job_is_its_own(result)
    assert guessed["join"] == ["wrong"] and guessed["report"] == ["wrong"], guessed
    assert not any("no job secret" in line for line in result.lines)
