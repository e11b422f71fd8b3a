"""The user's program on this host: starting it through the rank launcher, the verdict its exit gives,
and signalling the ranks started here (by this entry, by mpirun or by orted)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping

from sagetrain.contracts import RunDir
from sagetrain.launch.coordinator import EventQueue, ProcessExited
from sagetrain.launch.process import ManagedProcess
from sagetrain.launch.spec import JobSpec
from sagetrain.report.verdict import SUCCESS, RankFailure, Verdict


def start_program(
    spec: JobSpec, env: Mapping[str, str], events: EventQueue, name: str = "program"
) -> ManagedProcess:
    """Start the program through the rank launcher; its exit is posted to ``events``."""
    # Should this entry die, the rank launcher ends its program itself (launch/rank.py, end_with_parent).
    process = ManagedProcess.start(spec.rank_argv, name=name, env=env, cwd=spec.code_dir)
    process.on_exit(lambda p, code: events.put(ProcessExited(p.name, code)))
    return process


def verdict_for_exit(
    spec: JobSpec, exit_code: int, failure: RankFailure | None, what: str | None = None
) -> Verdict:
    """The verdict once the program (or mpirun) ended with ``exit_code``."""
    if exit_code == 0:
        return SUCCESS
    if failure is not None:
        return failure.verdict()
    what = what or f"{spec.program.name} on host {spec.plan.current_host}"
    if exit_code > 128:
        return Verdict(exit_code, f"{what} was killed by signal {exit_code - 128}")
    return Verdict(exit_code, f"{what} exited with code {exit_code}")


def signal_registered_ranks(run_dir: RunDir, signum: int = signal.SIGTERM) -> None:
    """Signal the ranks started on this host: each rank launcher's process group, which holds its
    program (mpirun makes every rank a group leader); a launcher that leads no group, and its program,
    one by one. After SIGKILL the registration goes too."""
    if not run_dir.ranks.is_dir():
        return
    for entry in run_dir.ranks.iterdir():
        if not entry.name.isdigit():
            continue
        launcher = int(entry.name)
        try:
            if os.getpgid(launcher) == launcher:
                os.killpg(launcher, signum)
            else:
                os.kill(launcher, signum)
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(entry.read_text().strip()), signum)
        except (ProcessLookupError, PermissionError):
            pass  # gone already
        if signum == signal.SIGKILL:
            entry.unlink(missing_ok=True)
