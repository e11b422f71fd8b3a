"""Running the cluster: the containers' logs, the run from create to the first exit and the stop of
the rest, the job's verdict, the signal gate, and the removal of trees and collection of outputs."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from localcluster.docker import (
    STOP_TIMEOUT_SECONDS,
    DockerCli,
    container_create_args,
    container_name,
    network_create_args,
    network_name,
    parse_docker_time,
)
from localcluster.spec import (
    EXIT_DOCKER,
    EXIT_TIMEOUT,
    DockerError,
    HostState,
    HostStatus,
    Interrupted,
    JobResult,
    RunSpec,
)


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

    def follow(self, docker: DockerCli, host: str, container: str) -> threading.Thread:
        process = docker.popen(["logs", "--follow", container])

        def pump() -> None:
            log_file = None
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                log_file = (self.log_dir / f"{host}.log").open("a", encoding="utf-8")
            try:
                for raw in process.stdout or ():
                    for line in raw.decode("utf-8", "replace").rstrip("\n").split("\r"):
                        if not line:
                            continue
                        with self.lock:
                            print(f"{host.ljust(self.width)} | {line}", flush=True)
                        if log_file is not None:
                            log_file.write(line + "\n")
                            log_file.flush()
            finally:
                process.wait()
                if log_file is not None:
                    log_file.close()

        thread = threading.Thread(target=pump, name=f"logs-{host}", daemon=True)
        thread.start()
        return thread


class ClusterRun:
    """Creates the network and containers, starts them (some later, on request), waits for the first
    exit, stops the rest, and always removes what it created."""

    def __init__(self, spec: RunSpec, trees: Mapping[str, Path], docker: DockerCli, printer: LogPrinter):
        self.spec = spec
        self.trees = trees
        self.docker = docker
        self.printer = printer
        self.statuses = {host: HostStatus(host, container_name(spec.job_name, host)) for host in spec.hosts}
        self.events: queue.Queue[tuple[str, int | None]] = queue.Queue()
        self.log_threads: dict[str, threading.Thread] = {}
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

    def start(self, host: str) -> None:
        status = self.statuses[host]
        self.docker.run(["start", status.container])
        status.state = HostState.STARTED
        self.log_threads[host] = self.printer.follow(self.docker, host, status.container)

        def wait_for_exit() -> None:
            try:
                code: int | None = int(self.docker.run(["wait", status.container], timeout=None))
            except (DockerError, ValueError):
                code = None
            self.events.put((host, code))

        threading.Thread(target=wait_for_exit, name=f"wait-{host}", daemon=True).start()

    # -- the job -----------------------------------------------------------------------------------
    def run(self) -> JobResult:
        began = time.monotonic()
        pending = {host: began + self.spec.start_delays.get(host, 0.0) for host in self.spec.hosts}
        job_deadline = None if self.spec.timeout_seconds is None else began + self.spec.timeout_seconds
        for host, delay in self.spec.start_delays.items():
            self.printer.say(f"{host} will start {delay:g} s after the others (--start-delay)")
        while not self.exit_order:
            now = time.monotonic()
            for host in [host for host, due in pending.items() if due <= now]:
                del pending[host]
                self.start(host)
            wake_times = [*pending.values(), *([job_deadline] if job_deadline is not None else [])]
            if job_deadline is not None and now >= job_deadline:
                reason = f"the job exceeded --timeout {self.spec.timeout_seconds:g} s"
                self.printer.say(f"{reason}: stopping every host")
                return self._finish(EXIT_TIMEOUT, None, reason, grace_seconds=0.0)
            try:
                event = self.events.get(timeout=max(0.0, min(wake_times) - now) if wake_times else None)
            except queue.Empty:
                continue
            self._record(*event)
        for host in pending:
            self.statuses[host].state = HostState.NEVER_STARTED
        first_host, code = job_verdict(self.exit_order)
        if first_host in self.log_threads:  # its last lines first, then the verdict they explain
            self.log_threads[first_host].join(timeout=5)
        self.printer.say(f"{first_host} exited first with code {code}: that is the job's verdict")
        return self._finish(code, first_host, f"{first_host} exited first with code {code}")

    def _record(self, host: str, code: int | None) -> None:
        status = self.statuses[host]
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
        """Give the other hosts `grace_seconds` to end on their own, then stop them as the SDK does."""
        for status in self.statuses.values():
            if status.state is HostState.CREATED:
                status.state = HostState.NEVER_STARTED
        self._collect_exits(time.monotonic() + grace_seconds)
        still_running = self._running()
        if still_running:
            names = ", ".join(status.host for status in still_running)
            self.printer.say(f"stopping {names} (docker stop -t {STOP_TIMEOUT_SECONDS})")
            for status in still_running:
                status.stopped_by_runner = True
            self.docker.run(
                ["stop", "-t", str(STOP_TIMEOUT_SECONDS), *(status.container for status in still_running)],
                check=False,
                timeout=STOP_TIMEOUT_SECONDS + 60,
            )
            self._collect_exits(time.monotonic() + 30)
        log_deadline = time.monotonic() + 10
        for thread in self.log_threads.values():
            thread.join(timeout=max(0.0, log_deadline - time.monotonic()))
        self._read_exit_times()

    def _collect_exits(self, deadline: float) -> None:
        while self._running():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                self._record(*self.events.get(timeout=remaining))
            except queue.Empty:
                return

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
        if self.network_created:
            try:
                self.docker.run(["network", "rm", network_name(self.spec.job_name)], check=False)
            except DockerError as error:
                failures.append(error)
        self.cleanup_seconds = time.monotonic() - began
        if failures:
            raise failures[0]


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
        self.previous: dict[int, object] = {}

    def __enter__(self) -> SignalGate:
        for signum in self.HANDLED:
            self.previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.armed = False
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame: object) -> None:
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
