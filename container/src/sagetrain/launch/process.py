"""One process abstraction: start / poll / wait(timeout) / terminate the whole tree with a grace period.

A child starts in its own session by default, so its process group holds everything it starts (a
shell's commands, the rank launcher's program) and one killpg reaches the tree. (mpirun puts each rank
in a group of its own and signals those groups itself.) The rank launcher starts its program in its own
group instead, so whatever signals the launcher's group, its program gets too.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from sagetrain.deadline import Deadline
from sagetrain.errors import exit_code_of_returncode

log = logging.getLogger(__name__)

TERMINATION_GRACE_SECONDS = 5.0  # SageMaker's local mode SIGKILLs 10 s after SIGTERM


_PR_SET_PDEATHSIG = 1


def _die_with_parent_hook(signum: int) -> Callable[[], None]:
    """A preexec hook: the child gets ``signum`` when its parent dies; no orphan outlives a killed
    launcher."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before fork: the child only calls it
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent:  # the parent died before the hook ran
            os._exit(128 + signum)

    return hook


@dataclass(frozen=True)
class RunAs:
    """Another user a process runs as (the launcher must be root to start it so): its user and group
    alone, no supplementary group, and a umask that keeps what it writes its own."""

    uid: int
    gid: int
    umask: int = 0o077


class ManagedProcess:
    def __init__(self, popen: subprocess.Popen, name: str) -> None:
        self._popen = popen
        self.name = name

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        name: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        new_session: bool = True,
        parent_death_signal: int = signal.SIGTERM,
        run_as: RunAs | None = None,
    ) -> ManagedProcess:
        """Start ``argv``; in a session of its own unless ``new_session`` is false (then in ours: our
        process group's signals reach it). It gets ``parent_death_signal`` when this process dies; with
        ``run_as``, it runs as that user."""
        identity: dict[str, Any] = {}
        if run_as is not None:
            identity = {"user": run_as.uid, "group": run_as.gid, "extra_groups": [], "umask": run_as.umask}
        popen = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdout=stdout,
            stderr=stderr,
            start_new_session=new_session,
            # The hook only calls prctl (no imports, no locks), so it is safe next to our threads.
            preexec_fn=_die_with_parent_hook(parent_death_signal),
            **identity,
        )
        return cls(popen, name)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def popen(self) -> subprocess.Popen:
        return self._popen

    def poll(self) -> int | None:
        code = self._popen.poll()
        return None if code is None else exit_code_of_returncode(code)

    def wait(self, timeout: float) -> int | None:
        """The exit code; None when the process still runs after ``timeout`` seconds."""
        try:
            return exit_code_of_returncode(self._popen.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def wait_for_exit(self) -> int:
        """The exit code, once the process has exited (callers bound it by stopping the process)."""
        return exit_code_of_returncode(self._popen.wait())

    def signal_tree(self, signum: int) -> None:
        """Signal the process's group (the whole tree when it leads a session of its own)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
            os.killpg(self._popen.pid, signum)

    def signal(self, signum: int) -> None:
        """Signal the process alone."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self._popen.send_signal(signum)

    def terminate_tree(self, grace: float = TERMINATION_GRACE_SECONDS) -> int:
        """SIGTERM the tree, SIGKILL whatever is left after ``grace`` seconds; the main process's code."""
        return terminate_trees([self], grace)[0]

    def on_exit(self, callback: Callable[[ManagedProcess, int], None]) -> threading.Thread:
        """Call ``callback(self, exit_code)`` from a watcher thread when the process exits."""

        def watch() -> None:
            callback(self, self.wait_for_exit())

        thread = threading.Thread(target=watch, name=f"watch-{self.name}", daemon=True)
        thread.start()
        return thread


def terminate_trees(
    processes: Sequence[ManagedProcess], grace: float = TERMINATION_GRACE_SECONDS
) -> list[int]:
    """SIGTERM every tree at once (each gets it once), SIGKILL whatever is left of them ``grace`` seconds
    later; the main processes' exit codes, in order."""
    for process in processes:
        process.signal_tree(signal.SIGTERM)
    stop = Deadline(grace, "the processes to stop after SIGTERM")
    codes = []
    for process in processes:
        code = process.wait(stop.remaining())
        if code is None:
            log.warning("%s did not stop within %g s of SIGTERM; killing it", process.name, grace)
        # Stragglers of the group (e.g. ranks whose parent exited) are killed either way.
        process.signal_tree(signal.SIGKILL)
        codes.append(code if code is not None else process.wait_for_exit())
    return codes


def exit_now(code: int) -> NoReturn:
    """End this process with ``code`` once its output is flushed: no atexit handlers and no waiting for
    threads (a watcher thread may block on a pipe for as long as a stray daemon holds it)."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
