"""Run jobs on a local cluster of containers through scripts/local-cluster, the user-facing runner.

Every run checks on its way out that the runner left no container and no network behind. Waits have
deadlines and say what they wait for; the runner itself gets a --timeout so it ends the job on its own.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from localcluster.docker import LABEL_JOB, container_name, network_name
from localcluster.dockercli import DockerCli
from sagetrain.deadline import Deadline
from sagetrain.launch.rank_output import untagged

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "scripts" / "local-cluster"
CASES = Path(__file__).resolve().parent / "cases"
HOST_LINE = re.compile(r"^(algo-\d+)\s*\| (.*)$")
DOCKER = DockerCli()  # the one Docker client (scripts/localcluster/dockercli.py); every call bounded
# How long a runner told to stop has to stop its job (its containers' grace included) and remove it.
STOP_SECONDS = 120
# TensorFlow's start-up lines, which no process of a job prints at the default log level: its CPU
# instructions, absl's log warning, and oneDNN's INFO record (on CPUs where oneDNN is on by default).
TENSORFLOW_STARTUP = re.compile(r"cpu_feature_guard|absl::InitializeLog|oneDNN custom operations")


def labelled(job_name: str) -> tuple[list[str], list[str]]:
    """The ids of the containers and of the networks the runner labelled for this job."""
    label = f"label={LABEL_JOB}={job_name}"
    containers = DOCKER.run(["ps", "--all", "--quiet", "--filter", label]).split()
    networks = DOCKER.run(["network", "ls", "--quiet", "--filter", label]).split()
    return containers, networks


def leftovers(job_name: str) -> list[str]:
    """Containers and networks the runner labelled for this job and did not remove."""
    containers, networks = labelled(job_name)
    return [f"container {name}" for name in containers] + [f"network {name}" for name in networks]


def unique_job_name(stem: str) -> str:
    """Unique across the processes of one run too (pytest-xdist's workers share the Docker engine)."""
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", stem)[:40].strip("-.")
    return f"t-{safe}-{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True)
class ClusterResult:
    exit_code: int
    lines: tuple[str, ...]
    summary: dict
    workdir: Path
    output: Path
    job_name: str

    def tree(self, host: str) -> Path:
        return self.workdir / host

    def host(self, host: str) -> dict:
        return self.summary["hosts"][host]

    @property
    def hosts(self) -> list[str]:
        return list(self.summary["hosts"])

    def exit_codes(self) -> dict[str, int | None]:
        return {host: facts["exit_code"] for host, facts in self.summary["hosts"].items()}

    def failure(self, host: str) -> str | None:
        path = self.tree(host) / "output" / "failure"
        return path.read_text(errors="replace") if path.is_file() else None

    def failure_line(self, host: str) -> str | None:
        text = self.failure(host)
        return None if text is None else (text.strip().splitlines() or [""])[0]

    def host_lines(self, host: str) -> list[str]:
        """What ``host`` printed, each line without the runner's host prefix and a rank's tag."""
        return [
            untagged(match.group(2))
            for line in self.lines
            if (match := HOST_LINE.match(line)) and match[1] == host
        ]

    def log(self) -> str:
        return "\n".join(self.lines)

    def describe(self) -> str:
        """What a failed assertion should show: the verdict, every host's code and failure, the tail."""
        parts = [f"job {self.job_name}: runner exit {self.exit_code}"]
        for host, facts in self.summary.get("hosts", {}).items():
            parts.append(
                f"  {host}: state={facts['state']} exit={facts['exit_code']} "
                f"stopped_by_runner={facts['stopped_by_runner']} failure={self.failure_line(host)!r}"
            )
        parts.append("--- last 60 lines ---")
        parts.extend(self.lines[-60:])
        return "\n".join(parts)


def cluster_args(
    image: str,
    hosts: int,
    code: Path | None,
    program: str | None = None,
    hyperparameters: Mapping[str, object] | None = None,
    channels: Mapping[str, Path] | None = None,
    env: Mapping[str, str] | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    args = ["--image", image, "--hosts", str(hosts)]
    if code is not None:
        args += ["--code", str(code)]
    if program is not None:
        args += ["--program", program]
    if hyperparameters:
        args += ["--hp-json", json.dumps(dict(hyperparameters))]
    for name, path in (channels or {}).items():
        args += ["--channel", f"{name}={path}"]
    for key, value in (env or {}).items():
        args += ["--env", f"{key}={value}"]
    return args + list(extra)


class RunningCluster:
    """A runner started in the background: its output is collected as it comes, so a test can wait for
    a line (an epoch, a rank's start) and then act on a container (kill, stop)."""

    def __init__(self, args: Sequence[str], workdir: Path, output: Path, job_name: str, timeout: float):
        self.workdir = workdir
        self.output = output
        self.job_name = job_name
        self.timeout = timeout
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.outsiders: list[str] = []  # the test's own containers on the job's network (``outsider``)
        command = [str(RUNNER), *args, "--job-name", job_name, "--workdir", str(workdir),
                   "--output", str(output), "--timeout", str(timeout)]  # fmt: skip
        print("$", " ".join(command), flush=True)
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout or ():
            line = line.rstrip("\n")
            print(line, flush=True)
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def container(self, host: str) -> str:
        return container_name(self.job_name, host)

    def wait_for_line(self, pattern: str, timeout: float, host: str | None = None) -> re.Match:
        """Block until a log line (of `host`, when given) matches `pattern`, or fail naming both."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self.changed:
            while True:
                for line in self.lines[seen:]:
                    match = HOST_LINE.match(line)
                    text = untagged(match.group(2)) if match else line
                    if (host is None or (match and match.group(1) == host)) and (found := regex.search(text)):
                        return found
                seen = len(self.lines)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.process.poll() is not None and not self.reader.is_alive()):
                    failure = AssertionError(
                        f"no log line matching {pattern!r} from {host or 'any host'} within {timeout:g} s "
                        f"(runner exit: {self.process.poll()}); last lines:\n" + "\n".join(self.lines[-40:])
                    )
                    break
                self.changed.wait(timeout=min(remaining, 5.0))
        # The test fails here and will not wait for the job: end it now, so that the runner removes its
        # containers and network (a runner left to a test session's exit loses its output pipe first).
        self._stop_and_fail(failure)

    def _stop_and_fail(self, failure: AssertionError) -> NoReturn:
        """Stop the job, then raise ``failure``: what the test reports, even when stopping fails too."""
        try:
            self.stop()
        except Exception as error:
            raise failure from error
        raise failure

    def __enter__(self) -> RunningCluster:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        """A test that leaves the block by an exception will not wait for the job: stop it now, so that
        its containers and network go. The test's own exception is what it reports."""
        if kind is None or self.process.poll() is not None:
            return
        try:
            self.stop()
        except Exception as stopping:
            print(f"stopping job {self.job_name} after the test failed: {stopping}", flush=True)

    def stop(self) -> None:
        """End the runner, which stops the job and removes its containers and network, and wait for it;
        a runner that does not end in STOP_SECONDS is killed and what it labelled removed here. The
        test's outsiders go first: the network cannot be removed while they are on it."""
        if self.outsiders:
            DOCKER.run(["rm", "--force", *self.outsiders], Deadline(60, "the outsiders to go"), check=False)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # the runner cleans up on SIGTERM
        try:
            self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
            containers, networks = labelled(self.job_name)
            if containers:
                removal = ["rm", "--force", "--volumes", *containers]
                DOCKER.run(removal, Deadline(60, "the job's containers"), check=False)
            for network in networks:
                DOCKER.run(["network", "rm", network], Deadline(60, "the job's network"), check=False)
        finally:
            self.reader.join(timeout=30)
        left = leftovers(self.job_name)
        assert not left, f"stopping job {self.job_name} left {left} behind"

    def wait(self) -> ClusterResult:
        """The runner ends the job itself at --timeout; give it the stop grace and cleanup on top."""
        try:
            code = self.process.wait(timeout=self.timeout + 90)
        except subprocess.TimeoutExpired:
            self._stop_and_fail(
                AssertionError(f"local-cluster did not end within --timeout {self.timeout:g} s + 90 s")
            )
        finally:
            self.reader.join(timeout=30)
        summary_path = self.output / "cluster-summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {"hosts": {}}
        result = ClusterResult(code, tuple(self.lines), summary, self.workdir, self.output, self.job_name)
        left = leftovers(self.job_name)
        assert not left, f"local-cluster left {left} behind\n{result.describe()}"
        return result


def start_cluster(
    tmp_path: Path, image: str, hosts: int, code: Path | None, *, name: str = "job", timeout: float = 600,
    **kwargs: object,
) -> RunningCluster:  # fmt: skip
    job_name = unique_job_name(name)
    base = tmp_path / job_name
    extra = list(kwargs.pop("extra", ()))  # type: ignore[arg-type]
    args = cluster_args(image, hosts, code, extra=extra, **kwargs)  # type: ignore[arg-type]
    return RunningCluster(args, base / "work", base / "out", job_name, timeout)


def run_cluster(tmp_path: Path, image: str, hosts: int, code: Path | None, **kwargs: object) -> ClusterResult:
    return start_cluster(tmp_path, image, hosts, code, **kwargs).wait()


def write_trees(tmp_path: Path, image: str, hosts: int, code: Path | None, **kwargs: object) -> Path:
    """Only write the host trees (a test then edits them and runs them with `--from-workdir`)."""
    workdir = tmp_path / "trees"
    args = cluster_args(image, hosts, code, **kwargs)  # type: ignore[arg-type]
    subprocess.run(
        [str(RUNNER), *args, "--workdir", str(workdir), "--write-only"],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return workdir


def run_workdir(
    tmp_path: Path, image: str, workdir: Path, *, name: str = "job", timeout: float = 600,
    extra: Sequence[str] = (),
) -> ClusterResult:  # fmt: skip
    job_name = unique_job_name(name)
    args = ["--image", image, "--from-workdir", *extra]
    output = tmp_path / f"{job_name}-out"
    return RunningCluster(args, workdir, output, job_name, timeout).wait()


def outsider(
    running: RunningCluster, image: str, tmp_path: Path, name: str, args: list[str], seconds: float
) -> dict:
    """cases/attacker/attack.py in a container on the job's network, knowing a copy of the job's
    configuration files (not its channels' data); what it printed as its ``ATTACK`` line."""
    known = tmp_path / f"known-{name}" / "input" / "config"
    shutil.copytree(running.workdir / "algo-2" / "input" / "config", known)
    container = outsider_container(running, name)
    running.outsiders.append(container)
    try:
        output = DOCKER.run(
            ["run", "--pull", "never", "--name", container, "--network", network_name(running.job_name),
             "--ulimit", "nofile=4096:4096", "--volume", f"{known.parent.parent}:/attacker/ml:ro",
             "--volume", f"{CASES / 'attacker'}:/attack:ro", "--entrypoint", "python", image,
             "/attack/attack.py", *args],
            Deadline(seconds, f"the outsider {name} to finish"),
        )  # fmt: skip
    finally:
        DOCKER.run(["rm", "--force", container], check=False)
    return json.loads(output.split("ATTACK ", 1)[1])


def outsider_container(running: RunningCluster, name: str) -> str:
    return f"{running.job_name}-{name}"


@contextmanager
def outsider_alongside(
    running: RunningCluster, image: str, tmp_path: Path, name: str, args: list[str], seconds: float
) -> Iterator[dict]:
    """``outsider`` in the background while the body runs; the dict holds its ``ATTACK`` line once it has
    ended. Leaving the body, however it leaves, stops the outsider (``docker stop``: it reports what it
    did) and waits for it, so that no container of the test's is still on the job's network when the
    runner removes that network. The outsider's own failure is raised once the body has succeeded."""
    report: dict = {}
    failures: list[Exception] = []

    def attack() -> None:
        try:
            report.update(outsider(running, image, tmp_path, name, args, seconds))
        except Exception as error:  # raised in the test's thread, below
            failures.append(error)

    thread = threading.Thread(target=attack, daemon=True)
    thread.start()
    try:
        yield report
    finally:
        container = outsider_container(running, name)
        DOCKER.run(["stop", container], Deadline(60, f"the outsider {name} to stop"), check=False)
        thread.join(60)
        if thread.is_alive():  # stopped before its container existed: it is running now
            DOCKER.run(["rm", "--force", container], Deadline(60, f"the outsider {name} to go"), check=False)
            thread.join(60)
    if failures:
        raise failures[0]


def exited_on_their_own(result: ClusterResult) -> dict[str, bool]:
    return {host: not facts["stopped_by_runner"] for host, facts in result.summary["hosts"].items()}


def seconds_after(result: ClusterResult, moment: float) -> dict[str, float | None]:
    """Each host's exit, in seconds after `moment` (wall clock), from the engine's FinishedAt."""
    return {
        host: None if facts["exited_at"] is None else round(facts["exited_at"] - moment, 2)
        for host, facts in result.summary["hosts"].items()
    }


# ---------------------------------------------------------------------------------------------------
# Data and what the cases under cases/ leave in each host's tree.


def write_regression_csv(folder: Path, rows: int, seed: int = 0, name: str = "train.csv") -> Path:
    """A small regression table (`a,b,c,d,label`) from the standard library, so test data needs nothing."""
    import random

    generator = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["a,b,c,d,label"]
    for _ in range(rows):
        x = [generator.uniform(-1, 1) for _ in range(4)]
        label = 0.5 * x[0] - x[1] + 0.25 * x[2] * x[3]
        lines.append(",".join(f"{value:.6f}" for value in [*x, label]))
    (folder / name).write_text("\n".join(lines) + "\n")
    return folder


def files_by_host(result: ClusterResult, pattern: str) -> dict[str, list[Path]]:
    """Files matching `pattern` under each host's /opt/ml/output/data."""
    return {host: sorted((result.tree(host) / "output" / "data").glob(pattern)) for host in result.hosts}


def identities(result: ClusterResult) -> dict[int, tuple[str, dict]]:
    """rank → (the host whose tree holds its identity file, what the rank said about itself)."""
    found: dict[int, tuple[str, dict]] = {}
    for host, paths in files_by_host(result, "identity-rank-*.json").items():
        for path in paths:
            identity = json.loads(path.read_text())
            assert identity["rank"] not in found, f"rank {identity['rank']} reported twice"
            found[identity["rank"]] = (host, identity)
    return found


def assert_identical_weights(paths: Sequence[Path]) -> None:
    """Every file holds the same arrays, bit for bit: gradients were averaged and state broadcast."""
    import numpy as np

    assert len(paths) >= 2, f"need weights from at least two ranks, got {[str(p) for p in paths]}"
    reference = np.load(paths[0])
    for path in paths[1:]:
        other = np.load(path)
        assert reference.files == other.files, f"{path.name} holds other arrays than {paths[0].name}"
        for key in reference.files:
            difference = float(np.max(np.abs(reference[key] - other[key]))) if reference[key].size else 0.0
            assert np.array_equal(reference[key], other[key]), (
                f"{path} differs from {paths[0]} in array {key} (max abs difference {difference:g})"
            )
