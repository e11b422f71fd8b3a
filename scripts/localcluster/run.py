"""Running the cluster: the containers' logs, the run from create to the first exit and the stop of
the rest, the job's verdict, the signal gate, and the removal of trees and collection of outputs."""

from __future__ import annotations

import contextlib
import math
import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from sagetrain.deadline import Deadline

from localcluster.docker import (
    container_create_args,
    container_name,
    network_create_args,
    network_name,
)
from localcluster.dockercli import ENGINE_HINT, DockerCli, DockerError, DockerProcess, parse_docker_time
from localcluster.spec import (
    EXIT_DOCKER,
    EXIT_TIMEOUT,
    HostState,
    HostStatus,
    Interrupted,
    JobResult,
    RunSpec,
)

STOP_COMMAND_MARGIN_SECONDS = 60.0  # `docker stop -t N` of every host still running: N, then this
EXITS_AFTER_STOP_SECONDS = 30.0  # the engine reports the exits of the hosts it stopped
LAST_LINES_SECONDS = 10.0  # the log followers print what the hosts printed last
FIRST_HOST_LINES_SECONDS = 5.0  # the first host's last lines, printed before the verdict they explain


def stop_command_seconds(stop_timeout_seconds: int) -> float:
    """How long `docker stop -t N` may take: the hosts' N seconds, and the engine's own work."""
    return stop_timeout_seconds + STOP_COMMAND_MARGIN_SECONDS


def wind_down_seconds(stop_timeout_seconds: int) -> float:
    """The longest wind-down after the --grace: the stop, the exits it causes, the last log lines."""
    return stop_command_seconds(stop_timeout_seconds) + EXITS_AFTER_STOP_SECONDS + LAST_LINES_SECONDS


def first_to_pass(deadlines: Iterable[Deadline]) -> float | None:
    """How long until the first of these deadlines passes; None (wait without end) when none will."""
    soonest = min((deadline.remaining() for deadline in deadlines), default=math.inf)
    return None if math.isinf(soonest) else soonest


def _ended_with(state: str) -> int | None:
    """The exit code in ``docker inspect``'s "{{.State.Running}} {{.State.ExitCode}}" of a container that
    has ended; None while it runs or when the answer is not that."""
    running, _, code = state.partition(" ")
    if running != "false":
        return None
    try:
        return int(code)
    except ValueError:
        return None


def job_verdict(exit_order: Sequence[tuple[str, int]]) -> tuple[str, int]:
    """SageMaker local mode's rule: the first container to exit decides the job; the others' codes
    are reported but do not change it."""
    if not exit_order:
        raise ValueError("no container has exited yet")
    return exit_order[0]


class LogPrinter:
    """Streams one container's output, each line prefixed with its host, to the console and a file."""

    def __init__(self, width: int, log_dir: Path | None) -> None:
        self.width = width
        self.log_dir = log_dir
        self.lock = threading.Lock()

    def say(self, text: str) -> None:
        with self.lock:
            print(f"local-cluster: {text}", flush=True)

    def follow(self, host: str, logs: DockerProcess) -> threading.Thread:
        """Print what `docker logs --follow` of `host` prints until it ends (with the container, or when
        its deadline passes or its owner stops it)."""

        def pump() -> None:
            log_file = None
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                log_file = (self.log_dir / f"{host}.log").open("a", encoding="utf-8")
            try:
                for raw in logs.stdout:
                    for line in raw.decode("utf-8", "replace").rstrip("\n").split("\r"):
                        if not line:
                            continue
                        with self.lock:
                            print(f"{host.ljust(self.width)} | {line}", flush=True)
                        if log_file is not None:
                            log_file.write(line + "\n")
                            log_file.flush()
            finally:
                try:
                    logs.finish()
                except DockerError as error:
                    self.say(f"{host}: {error}")
                if log_file is not None:
                    log_file.close()

        thread = threading.Thread(target=pump, name=f"logs-{host}", daemon=True)
        thread.start()
        return thread


class ClusterRun:
    """Creates the network and containers, starts them (some later, on request), waits for the first
    exit, stops the rest, and always removes what it created.

    Every wait has a Deadline: the job's (--timeout; none without it), each --start-delay, the --grace,
    the stop, the exits after the stop, the last log lines, and every docker call its own. The watchers
    of a started host (`docker wait`, `docker logs --follow`) may last as long as the job and its wind-down;
    remove() ends any still running."""

    def __init__(self, spec: RunSpec, trees: Mapping[str, Path], docker: DockerCli, printer: LogPrinter):
        self.spec = spec
        self.trees = trees
        self.docker = docker
        self.printer = printer
        self.statuses = {host: HostStatus(host, container_name(spec.job_name, host)) for host in spec.hosts}
        self.events: queue.Queue[tuple[str, int | None]] = queue.Queue()
        self.log_threads: dict[str, threading.Thread] = {}
        self.watchers: list[DockerProcess] = []
        self.exit_order: list[tuple[str, int]] = []
        self.network_created = False
        self.created: list[str] = []
        self.cleanup_seconds: float | None = None
        self.removed_at: float | None = None  # wall clock when every container was gone

    # -- setup -------------------------------------------------------------------------------------
    def create(self) -> None:
        # Flags first: a create that fails or is interrupted half-way is still cleaned up (preflight
        # made sure no other container or network has these names).
        self.network_created = True
        self.docker.run(network_create_args(self.spec.job_name))
        for host in self.spec.hosts:
            name = container_name(self.spec.job_name, host)
            self.created.append(name)  # before the call: a half-failed create still gets removed
            self.docker.run(container_create_args(self.spec, host, self.trees[host]))

    def start(self, host: str, watch: Deadline) -> None:
        status = self.statuses[host]
        self.docker.run(["start", status.container])
        status.state = HostState.STARTED
        logs = self.docker.start(["logs", "--follow", status.container], watch)
        self.watchers.append(logs)
        self.log_threads[host] = self.printer.follow(host, logs)
        exit_watch = self.docker.start(["wait", status.container], watch, stderr_to_stdout=False)
        self.watchers.append(exit_watch)
        threading.Thread(
            target=self._report_exit, args=(host, exit_watch), name=f"wait-{host}", daemon=True
        ).start()

    def _report_exit(self, host: str, exit_watch: DockerProcess) -> None:
        """`docker wait` prints the exit code; nothing (None) when it was stopped or failed."""
        code: int | None = None
        try:
            code = int(exit_watch.finish().stdout)
        except DockerError as error:
            self.printer.say(f"{host}: {error}")
        except ValueError:
            pass
        self.events.put((host, code))

    # -- the job -----------------------------------------------------------------------------------
    def job_deadline(self) -> Deadline:
        seconds = math.inf if self.spec.timeout_seconds is None else self.spec.timeout_seconds
        return Deadline(seconds, f"job {self.spec.job_name} to end (--timeout)")

    def watch_deadline(self, job: Deadline) -> Deadline:
        seconds = job.seconds + self.spec.grace_seconds + wind_down_seconds(self.spec.stop_timeout_seconds)
        return Deadline(seconds, f"the containers of job {self.spec.job_name} to end", ENGINE_HINT)

    def run(self) -> JobResult:
        job = self.job_deadline()
        watch = self.watch_deadline(job)
        pending = {
            host: Deadline(self.spec.start_delays.get(host, 0.0), f"the --start-delay of {host}")
            for host in self.spec.hosts
        }
        for host, delay in self.spec.start_delays.items():
            self.printer.say(f"{host} will start {delay:g} s after the others (--start-delay)")
        while not self.exit_order:
            for host in [host for host, due in pending.items() if due.expired()]:
                del pending[host]
                self.start(host, watch)
            if job.expired():
                reason = f"the job exceeded --timeout {self.spec.timeout_seconds:g} s"
                self.printer.say(f"{reason}: stopping every host")
                return self._finish(EXIT_TIMEOUT, None, reason, grace_seconds=0.0)
            with contextlib.suppress(queue.Empty):
                self._record(*self.events.get(timeout=first_to_pass([*pending.values(), job])))
        for host in pending:
            self.statuses[host].state = HostState.NEVER_STARTED
        first_host, code = job_verdict(self.exit_order)
        self._await_last_lines([first_host], FIRST_HOST_LINES_SECONDS)  # then the verdict they explain
        self.printer.say(f"{first_host} exited first with code {code}: that is the job's verdict")
        return self._finish(code, first_host, f"{first_host} exited first with code {code}")

    def _record(self, host: str, code: int | None) -> None:
        status = self.statuses[host]
        if status.state is not HostState.STARTED:
            return  # already recorded, from the engine: its watcher's report came after
        status.state = HostState.EXITED
        status.exit_code = code
        self.exit_order.append((host, code if code is not None else EXIT_DOCKER))

    def _running(self) -> list[HostStatus]:
        return [status for status in self.statuses.values() if status.state is HostState.STARTED]

    def _finish(
        self, verdict: int, first_host: str | None, reason: str, grace_seconds: float | None = None
    ) -> JobResult:
        self.wind_down(self.spec.grace_seconds if grace_seconds is None else grace_seconds)
        return JobResult(verdict, first_host, reason, tuple(self.statuses.values()))

    def wind_down(self, grace_seconds: float) -> None:
        """Give the other hosts `grace_seconds` to end on their own, then stop them as the SDK does
        (`docker stop -t` with --stop-timeout, SDK local mode's 10 s unless given)."""
        for status in self.statuses.values():
            if status.state is HostState.CREATED:
                status.state = HostState.NEVER_STARTED
        self._collect_exits(Deadline(grace_seconds, "the other hosts to end on their own (--grace)"))
        still_running = self._running()
        if still_running:
            names = ", ".join(status.host for status in still_running)
            stop_timeout = self.spec.stop_timeout_seconds
            self.printer.say(f"stopping {names} (docker stop -t {stop_timeout})")
            for status in still_running:
                status.stopped_by_runner = True
            self.docker.run(
                ["stop", "-t", str(stop_timeout), *(status.container for status in still_running)],
                Deadline(stop_command_seconds(stop_timeout), f"{names} to stop", ENGINE_HINT),
                check=False,
            )
            exits = Deadline(
                EXITS_AFTER_STOP_SECONDS,
                "the engine to report the exits of the stopped hosts",
                "they are removed with docker rm --force next",
            )
            self._take_exits_from_the_engine(exits)
            self._collect_exits(exits)
            if self._running():
                self.printer.say(exits.timeout_message(", ".join(status.host for status in self._running())))
        self._await_last_lines(list(self.log_threads), LAST_LINES_SECONDS)
        self._read_exit_times()

    def _take_exits_from_the_engine(self, deadline: Deadline) -> None:
        """Record the exit code the engine holds for every host still counted as running. Once `docker
        stop` has returned, the engine knows how its containers ended; a host's `docker wait` watcher can
        report that long after on a loaded engine (over 30 s, seen in CI). Best effort: a host the engine
        does not answer for is left to its watcher."""
        running = {status.container: status for status in self._running()}
        if not running:
            return
        with contextlib.suppress(DockerError):
            answer = self.docker.run(
                ["inspect", "--format", "{{.Name}} {{.State.Running}} {{.State.ExitCode}}", *running],
                deadline,
                check=False,  # a container gone since is left out of the answer, the others are in it
            )
            for line in answer.splitlines():
                name, _, state = line.strip().lstrip("/").partition(" ")
                if name in running:
                    exit_code = _ended_with(state)
                    if exit_code is not None:
                        running[name].state, running[name].exit_code = HostState.EXITED, exit_code

    def _collect_exits(self, deadline: Deadline) -> None:
        while self._running() and not deadline.expired():
            with contextlib.suppress(queue.Empty):
                self._record(*self.events.get(timeout=deadline.remaining()))

    def _await_last_lines(self, hosts: Iterable[str], seconds: float) -> None:
        threads = {host: self.log_threads[host] for host in hosts if host in self.log_threads}
        deadline = Deadline(
            seconds, f"the last log lines of {', '.join(threads)}", "what they printed later is not shown"
        )
        for thread in threads.values():
            thread.join(timeout=deadline.remaining())
        late = [host for host, thread in threads.items() if thread.is_alive()]
        if late:
            self.printer.say(deadline.timeout_message(", ".join(late)))

    def _read_exit_times(self) -> None:
        for status in self.statuses.values():
            if status.state is not HostState.EXITED:
                continue
            times = self.docker.run(
                ["inspect", "--format", "{{.State.StartedAt}} {{.State.FinishedAt}}", status.container],
                check=False,
            ).split()
            if len(times) == 2:
                status.started_at, status.exited_at = (parse_docker_time(text) for text in times)

    # -- cleanup -----------------------------------------------------------------------------------
    def remove(self) -> None:
        """Each step is tried even when an earlier one failed; the first failure is raised after."""
        began = time.monotonic()
        failures: list[DockerError] = []
        if self.created:
            try:
                self.docker.run(["rm", "--force", "--volumes", *self.created], check=False)
            except DockerError as error:
                failures.append(error)
        self.removed_at = time.time()
        for watcher in self.watchers:  # ended with their containers, or by this
            watcher.stop()
        if self.network_created:
            try:
                self._remove_network(network_name(self.spec.job_name))
            except DockerError as error:
                failures.append(error)
        self.cleanup_seconds = time.monotonic() - began
        if failures:
            raise failures[0]

    def _remove_network(self, network: str) -> None:
        if self.docker.call(["network", "rm", network]).returncode == 0:
            return
        # Refused: a container the job did not make (a test's outsider, someone's debugging shell) is
        # still on the job's network. The network goes, so they leave it first.
        members = self.docker.run(
            ["network", "inspect", "--format", "{{range .Containers}}{{.Name}} {{end}}", network], check=False
        ).split()
        for member in members:
            self.docker.run(["network", "disconnect", "--force", network, member], check=False)
        self.docker.run(["network", "rm", network], check=False)


def remove_tree(path: Path, docker: DockerCli, image: str) -> None:
    """Containers write as root into the bind mounts; a non-root user needs the image to delete that."""
    try:
        shutil.rmtree(path)
    except PermissionError:
        with contextlib.suppress(DockerError):
            docker.run(
                ["run", "--rm", "--pull", "never", "--network", "none", "--entrypoint", "rm",
                 "--mount", f"type=bind,source={path.resolve()},target=/cleanup", image,
                 "-rf", "/cleanup"],
                check=False,
            )  # fmt: skip
        shutil.rmtree(path, ignore_errors=True)
    except FileNotFoundError:
        pass


def collect_outputs(tree: Path, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    for folder in ("model", "output"):
        source = tree / folder
        if source.is_dir():
            shutil.copytree(source, output / folder, dirs_exist_ok=True, symlinks=True)


class SignalGate:
    """SIGINT and SIGTERM while the gate is installed. They raise Interrupted only inside `raising()`
    (writing the trees, running the job), and at most once; anywhere else, cleanup above all, they are
    only recorded, so no signal can cut a cleanup short, however it is timed. A signal recorded before
    `raising()` is entered raises on entry."""

    HANDLED = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: list[int] = []
        self.armed = False
        self.previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> SignalGate:
        for signum in self.HANDLED:
            self.previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.armed = False
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.armed:
            self.armed = False
            raise Interrupted(signum)
        # os.write, not print: the interrupted code may hold the console lock.
        os.write(2, b"local-cluster: cleaning up, please wait\n")

    @contextlib.contextmanager
    def raising(self) -> Iterator[None]:
        if self.received:
            raise Interrupted(self.received[0])
        self.armed = True
        try:
            yield
        finally:
            self.armed = False
