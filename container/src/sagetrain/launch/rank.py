"""The rank launcher (``sagetrain-rank -- <argv…>``): runs one rank of the program on its own host.

It gives the rank its own host's identity (mpirun copies the master's environment to every rank), the
rank variables, an error file, forwards SIGTERM/SIGINT, keeps the last output lines, and when the
program fails reports ``{rank, host, exit code, message, last lines}`` to the master's coordinator.
See docs/contracts.md ("Launcher ↔ rank launcher").
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import IO, Any

from sagetrain.config.files import read_json_object
from sagetrain.config.paths import Paths, root_from_environ
from sagetrain.errors import SagetrainError
from sagetrain.launch.coordinator import send_rank_failure
from sagetrain.launch.process import ManagedProcess
from sagetrain.report.verdict import RankFailure

LAST_LINES = 20
DEFAULT_RUN_DIR = "/run/sagetrain"


def rank_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """SAGETRAIN_RANK/LOCAL_RANK/SIZE/LOCAL_SIZE from OpenMPI's, else as the launcher set them."""
    pairs = {
        "SAGETRAIN_RANK": ("OMPI_COMM_WORLD_RANK", "0"),
        "SAGETRAIN_LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        "SAGETRAIN_SIZE": ("OMPI_COMM_WORLD_SIZE", "1"),
        "SAGETRAIN_LOCAL_SIZE": ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
    }
    return {ours: environ.get(mpi) or environ.get(ours) or default for ours, (mpi, default) in pairs.items()}


def own_host_variables(environ: Mapping[str, str], current_host: str) -> dict[str, str]:
    """SM_CURRENT_HOST, CURRENT_HOST and SM_TRAINING_ENV's current_host/is_master for this host."""
    updates = {"SM_CURRENT_HOST": current_host, "CURRENT_HOST": current_host}
    raw = environ.get("SM_TRAINING_ENV")
    if raw:
        try:
            training_env = json.loads(raw)
        except ValueError:
            training_env = None
        if isinstance(training_env, dict):
            training_env["current_host"] = current_host
            if "master_hostname" in training_env:
                training_env["is_master"] = training_env["master_hostname"] == current_host
            updates["SM_TRAINING_ENV"] = json.dumps(training_env, sort_keys=True, separators=(",", ":"))
    return updates


def _copy_lines(
    source: IO[bytes], sink: IO[bytes], tail: collections.deque[str], lock: threading.Lock
) -> None:
    for line in iter(source.readline, b""):
        sink.write(line)
        sink.flush()
        with lock:
            tail.append(line.decode("utf-8", "replace").rstrip("\n"))
    source.close()


def _read_error_file(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def coordinator_address(value: str, own_host: str) -> tuple[str, int] | None:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        return None
    return ("127.0.0.1" if host == own_host else host), int(port)


def run_rank(argv: list[str], environ: MutableMapping[str, str]) -> int:
    if not argv:
        print("usage: sagetrain-rank -- PROGRAM [ARG...]", file=sys.stderr)
        return 2
    try:
        paths = Paths(root_from_environ(environ))
        current_host = str(read_json_object(paths.resource_config).get("current_host") or "")
    except SagetrainError:
        current_host = ""
    current_host = current_host or environ.get("SM_CURRENT_HOST", "")
    env = dict(environ)
    env.update(own_host_variables(environ, current_host))
    env.update(rank_variables(environ))
    rank = int(env["SAGETRAIN_RANK"])
    run_dir = Path(environ.get("SAGETRAIN_RUN_DIR", DEFAULT_RUN_DIR))
    error_file = run_dir / "errors" / f"rank-{rank}.json"
    error_file.parent.mkdir(parents=True, exist_ok=True)
    error_file.unlink(missing_ok=True)
    env["SAGETRAIN_ERROR_FILE"] = str(error_file)

    # Handlers go in before the program starts: a SIGTERM between its start and their installation would
    # kill this launcher by default and leave the program (in its own session) running.
    received: list[int] = []
    started: list[ManagedProcess] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        for process in started:
            process.signal_tree(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    program = ManagedProcess.start(argv, name="rank", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started.append(program)
    for signum in received:  # arrived while the program was starting
        program.signal_tree(signum)
    # Registered so a worker host's agent can stop the ranks sshd/orted started on it.
    registry = run_dir / "ranks" / str(os.getpid())
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text(str(program.pid))
    tail: collections.deque[str] = collections.deque(maxlen=LAST_LINES)
    lock = threading.Lock()
    copiers = [
        threading.Thread(
            target=_copy_lines, args=(program.popen.stdout, sys.stdout.buffer, tail, lock), daemon=True
        ),
        threading.Thread(
            target=_copy_lines, args=(program.popen.stderr, sys.stderr.buffer, tail, lock), daemon=True
        ),
    ]
    for copier in copiers:
        copier.start()
    try:
        code = int(program.wait())
        for copier in copiers:
            copier.join(timeout=5.0)  # a daemon the program left behind may hold the pipe open
    finally:
        registry.unlink(missing_ok=True)
    if code != 0:
        error = _read_error_file(error_file)
        with lock:
            last_lines = tuple(tail)
        failure = RankFailure(
            rank=rank,
            host=current_host or "unknown",
            exit_code=code,
            program=environ.get("SAGETRAIN_PROGRAM", Path(argv[0]).name),
            message=" ".join(str(error.get("message", "")).split()),
            traceback=str(error.get("traceback", "")),
            last_lines=last_lines,
        )
        address = coordinator_address(environ.get("SAGETRAIN_COORDINATOR", ""), current_host)
        if address is not None:
            send_rank_failure(*address, failure)
    return code


def main() -> None:
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        raise SystemExit(0)
    if args[:1] == ["--"]:
        args = args[1:]
    code = run_rank(args, os.environ)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
