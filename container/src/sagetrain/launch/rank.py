"""The rank launcher (``sagetrain-rank -- <argv…>``): runs one rank of the program on its own host.

It gives the rank its own host's identity and facts (mpirun copies the master's environment to every
rank: SM_CURRENT_HOST, SM_RESOURCE_CONFIG, SM_NUM_GPUS... and SM_TRAINING_ENV would be the master's), the
rank variables and an error file; it tells the master it started, runs the program in the launcher's
own process group (a signal for the rank reaches both), keeps the last output lines, and when the
program fails reports ``{rank, host, exit code, message, last lines}`` to the master's coordinator.
See docs/contracts.md ("Launcher ↔ rank launcher").
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, MutableMapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from sagetrain.atomic_file import write_atomically
from sagetrain.config.files import read_json_object
from sagetrain.config.paths import Paths, root_from_environ, run_dir_from_environ
from sagetrain.config.toolkit_env import with_fields
from sagetrain.errors import PlatformError, SagetrainError
from sagetrain.launch.coordinator import send_rank_failure, send_rank_started
from sagetrain.launch.process import ManagedProcess
from sagetrain.report.verdict import RankFailure

LAST_LINES = 20
HOST_FACTS_FILE = "host.json"


def rank_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """SAGETRAIN_RANK/LOCAL_RANK/SIZE/LOCAL_SIZE from OpenMPI's, else as the launcher set them."""
    pairs = {
        "SAGETRAIN_RANK": ("OMPI_COMM_WORLD_RANK", "0"),
        "SAGETRAIN_LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        "SAGETRAIN_SIZE": ("OMPI_COMM_WORLD_SIZE", "1"),
        "SAGETRAIN_LOCAL_SIZE": ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
    }
    return {ours: environ.get(mpi) or environ.get(ours) or default for ours, (mpi, default) in pairs.items()}


@dataclass(frozen=True)
class HostFacts:
    """What this host's entry detected, for the ranks mpirun starts here with the master's environment:
    written to ``<SAGETRAIN_RUN_DIR>/host.json`` before the job starts (rank launchers run
    nvidia-smi themselves only at a cost: a second or more each on some GPU hosts)."""

    host: str
    num_gpus: int
    num_cpus: int

    def write(self, run_dir: Path) -> Path:
        path = run_dir / HOST_FACTS_FILE
        try:
            write_atomically(path, json.dumps(asdict(self)))
        except OSError as error:
            raise PlatformError(
                f"cannot write {path} ({error.strerror or error}); SAGETRAIN_RUN_DIR must name a folder "
                "this host can write"
            ) from None
        return path

    @classmethod
    def read(cls, run_dir: Path, host: str) -> HostFacts | None:
        """This host's facts; None when there are none, or they are another host's."""
        try:
            raw = json.loads((run_dir / HOST_FACTS_FILE).read_text(encoding="utf-8"))
            facts = cls(str(raw["host"]), int(raw["num_gpus"]), int(raw["num_cpus"]))
        except (OSError, ValueError, TypeError, KeyError):
            return None
        return facts if facts.host == host else None


def host_resource_config(resource_config: Mapping[str, Any], host: str) -> dict[str, Any]:
    """resourceconfig.json as SageMaker writes it on ``host``, made from another host's: ``host`` is
    current, with its instance group and type when the config lists groups. Pure (the dry run's view
    of the other hosts)."""
    own = {**resource_config, "current_host": host}
    for group in resource_config.get("instance_groups") or []:
        if isinstance(group, dict) and host in (group.get("hosts") or []):
            own["current_group_name"] = group.get("instance_group_name")
            own["current_instance_type"] = group.get("instance_type", "local")
    return own


def own_host_variables(
    environ: Mapping[str, str],
    current_host: str,
    resource_config: Mapping[str, Any] | None = None,
    facts: HostFacts | None = None,
) -> dict[str, str]:
    """The variables that describe the host a process runs on, for ``current_host``: SM_CURRENT_HOST,
    CURRENT_HOST and, from that host's own ``resource_config`` (resourceconfig.json), SM_RESOURCE_CONFIG,
    SM_CURRENT_INSTANCE_TYPE/GROUP/GROUP_HOSTS; from its ``facts``, SM_NUM_GPUS and SM_NUM_CPUS; the
    same fields inside SM_TRAINING_ENV. Values as sagemaker_training formats them. Pure."""
    fields: dict[str, Any] = {"current_host": current_host}
    if resource_config is not None:
        group = str(resource_config.get("current_group_name", "homogeneousCluster"))
        group_hosts = next(
            (
                list(g.get("hosts") or [])
                for g in resource_config.get("instance_groups") or []
                if isinstance(g, dict) and g.get("instance_group_name") == group
            ),
            [],
        )
        fields.update(
            resource_config=dict(resource_config),
            current_instance_type=str(resource_config.get("current_instance_type", "local")),
            current_instance_group=group,
            current_instance_group_hosts=group_hosts,
        )
    if facts is not None:
        fields.update(num_gpus=facts.num_gpus, num_cpus=facts.num_cpus)
    return {**with_fields(environ, fields), "CURRENT_HOST": current_host}


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


def end_with_parent(parent: int, program: ManagedProcess) -> None:
    """Once ``parent`` (whoever started this launcher: the entry, mpirun or orted) has exited, SIGKILL
    this launcher's process group: the program, whatever it started, and this launcher. Nothing else
    stops the rank then: its signals come from that parent. Blocks; run it on a thread."""
    try:
        pidfd = os.pidfd_open(parent)
    except ProcessLookupError:
        pidfd = None  # gone already
    except OSError:
        return  # no pidfd on this kernel: the program still dies with this launcher
    if pidfd is not None and os.getppid() == parent:
        select.select([pidfd], [], [])  # readable once the parent has exited
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    program.signal(signal.SIGKILL)  # a launcher that leads no group (started by hand) stops its program


def run_rank(argv: list[str], environ: MutableMapping[str, str]) -> int:
    if not argv:
        print("usage: sagetrain-rank -- PROGRAM [ARG...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    run_dir = run_dir_from_environ(environ)
    try:
        resource_config: dict[str, Any] | None = read_json_object(
            Paths(root_from_environ(environ)).resource_config
        )
    except SagetrainError:
        resource_config = None
    current_host = str((resource_config or {}).get("current_host") or "")
    current_host = current_host or environ.get("SM_CURRENT_HOST", "")
    env = dict(environ)
    env.update(
        own_host_variables(
            environ,
            current_host,
            resource_config if current_host else None,
            HostFacts.read(run_dir, current_host),
        )
    )
    env.update(rank_variables(environ))
    rank = int(env["SAGETRAIN_RANK"])
    error_file = run_dir / "errors" / f"rank-{rank}.json"
    error_file.parent.mkdir(parents=True, exist_ok=True)
    error_file.unlink(missing_ok=True)
    env["SAGETRAIN_ERROR_FILE"] = str(error_file)

    # The program runs in this launcher's process group, so a signal for the rank (OpenMPI and the entry
    # signal the rank launcher's group) reaches the program and whatever it started, SIGKILL included:
    # nothing is passed on, or the program would get it twice. Only a signal that came before the program
    # existed (while the master acknowledges the start) is passed on. Handlers go in before the program
    # starts: SIGTERM's default would kill this launcher alone.
    received: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    address = coordinator_address(environ.get("SAGETRAIN_COORDINATOR", ""), current_host)
    if address is not None:  # the master bounds mpirun's start by these (launch/mpi.py)
        send_rank_started(*address, rank, current_host or "unknown")

    before_start = len(received)
    program = ManagedProcess.start(
        argv,
        name="rank",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        new_session=False,
        parent_death_signal=signal.SIGKILL,  # the program never outlives its launcher
    )
    for signum in received[:before_start]:  # later ones reached the program through the group
        program.signal(signum)
    threading.Thread(target=end_with_parent, args=(parent, program), name="parent", daemon=True).start()
    # Registered so the entry on this host can stop the ranks (sshd/orted started them on a worker).
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
