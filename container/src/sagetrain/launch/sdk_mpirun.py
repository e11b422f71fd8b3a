"""``mpirun`` as the SageMaker SDK v3's MPI driver runs it, with ``MPI(process_count_per_node=N)`` meaning
N ranks on every host, as the SDK documents it.

The driver (``mpi_driver.py`` in sagemaker-train 1.27) runs ``mpirun --host h1:N,h2:N -np N … python -m
mpi4py <entry script> …``: N ranks for the whole job, which fill the first host's N slots and leave every
other host idle. Before the driver starts, the image puts a small ``mpirun`` first on the driver's
``PATH`` (``install``); it runs this module, which gives the real ``mpirun`` ``-np`` hosts × N when the
command asks for exactly N on hosts of N slots each and places no ranks itself (``--map-by``, ``-npernode``,
a host file…). A command that already asks for hosts × N (a driver that counts per node itself) or that
places its ranks (``mpi_additional_options=["--map-by", "ppr:8:node"]``) runs as given.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sagetrain.contracts import RunDir

MPIRUN = "mpirun"
_HOST_OPTIONS = ("--host", "-host", "-H")
_COUNT_OPTIONS = ("-np", "--np", "-n", "--n", "-c")
# Options with which a command decides itself how many ranks run where.
_PLACING_OPTIONS = frozenset(
    {
        "--map-by", "-map-by", "--npernode", "-npernode", "-N", "--ppr", "-ppr", "--npersocket",
        "-npersocket", "--rankfile", "-rf", "--hostfile", "-hostfile", "--machinefile", "-machinefile",
        "--default-hostfile", "-default-hostfile", "--bynode", "-bynode", "--pernode", "-pernode",
    }
)  # fmt: skip
# What the driver runs after mpirun's options: the interpreter, then ``-m mpi4py <entry script>``.
_PROGRAM_MARK = ("-m", "mpi4py")


@dataclass(frozen=True)
class MpirunRequest:
    """What an ``mpirun`` command line asks for, as far as placing ranks goes."""

    slots: tuple[int, ...]  # per host named by --host, in order
    processes: int
    places_ranks: bool  # it gives a placement option of its own

    def per_node_processes(self) -> int | None:
        """-np for N ranks on each host, when the command asks for N in all on hosts of N slots each;
        None when it should run as given. Pure."""
        if self.places_ranks or len(self.slots) < 2 or len(set(self.slots)) != 1:
            return None
        if self.processes != self.slots[0]:
            return None  # already hosts × N (or another count the command chose)
        return self.processes * len(self.slots)


def _host_slots(value: str) -> tuple[int, ...] | None:
    slots = []
    for host in value.split(","):
        name, _, count = host.partition(":")
        if not name or (count and not count.isdigit()):
            return None
        slots.append(int(count) if count else 1)  # Open MPI's one slot for a host named without a count
    return tuple(slots)


def _options_end(argv: Sequence[str]) -> int | None:
    """Where mpirun's options end: the index of the interpreter before ``-m mpi4py``."""
    for index in range(1, len(argv) - 1):
        if tuple(argv[index : index + 2]) == _PROGRAM_MARK:
            return index - 1
    return None


def _option(tokens: Sequence[str], index: int) -> tuple[str, str]:
    """(name, value) of the option at ``index``: ``--name=value``, or ``--name value``."""
    name, equals, value = tokens[index].partition("=")
    if equals:
        return name, value
    return name, tokens[index + 1] if index + 1 < len(tokens) else ""


def read_request(options: Sequence[str]) -> MpirunRequest | None:
    """The request in ``mpirun``'s options, or None when they name no hosts or no count. Pure."""
    slots: tuple[int, ...] | None = None
    processes: int | None = None
    places = False
    for index in range(len(options)):
        name, value = _option(options, index)
        places = places or name in _PLACING_OPTIONS
        if name in _HOST_OPTIONS:
            slots = _host_slots(value)
        elif name in _COUNT_OPTIONS and value.isdigit():
            processes = int(value)
    if slots is None or processes is None:
        return None
    return MpirunRequest(slots, processes, places)


def corrected(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """(``mpirun``'s arguments to run, the line saying what changed or None), from its arguments as the
    driver gave them (without the program name). Unchanged unless they are the shape the SDK's driver
    gives and ask for N ranks in all on hosts of N slots each. Pure."""
    end = _options_end(argv)
    request = read_request(argv[:end]) if end is not None else None
    total = request.per_node_processes() if request is not None else None
    if request is None or total is None or end is None:
        return list(argv), None
    fixed = list(argv)
    for index in range(end):
        name, _ = _option(fixed, index)
        if name in _COUNT_OPTIONS and "=" in fixed[index]:
            fixed[index] = f"{name}={total}"
        elif name in _COUNT_OPTIONS and index + 1 < end:
            fixed[index + 1] = str(total)
    hosts, per_node = len(request.slots), request.slots[0]
    note = (
        f"MPI(process_count_per_node={per_node}) asks for {per_node} processes on each host, but the "
        f"SageMaker SDK's MPI driver gave mpirun -np {per_node} for the whole job: running {total}, "
        f"{per_node} on each of the job's {hosts} hosts"
    )
    return fixed, note


def wrapper_dir(run_dir: RunDir) -> Path:
    return run_dir.root / "sdk-mpirun"


def install(environ: MutableMapping[str, str], run_dir: RunDir, python: str = sys.executable) -> Path:
    """Put this module's ``mpirun`` first on ``environ``'s PATH (the driver's process); the script's path."""
    folder = wrapper_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / MPIRUN
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(python)} -m {__name__} "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    environ["PATH"] = os.pathsep.join([str(folder), *_other_entries(environ.get("PATH", ""), folder)])
    return script


def _other_entries(path: str, folder: Path) -> list[str]:
    return [entry for entry in path.split(os.pathsep) if entry and Path(entry) != folder]


def main(argv: Sequence[str], environ: MutableMapping[str, str]) -> None:
    """Run the real mpirun with the corrected arguments; does not return."""
    here = wrapper_dir(RunDir.from_env(environ))
    # Also what mpirun's `-x PATH` forwards to the ranks: without this wrapper.
    environ["PATH"] = os.pathsep.join(_other_entries(environ.get("PATH", ""), here))
    real = shutil.which(MPIRUN, path=environ["PATH"])
    if real is None:
        sys.stderr.write(f"sagetrain: {MPIRUN} is not on PATH ({environ['PATH']})\n")
        raise SystemExit(127)
    arguments, note = corrected(argv)
    if note is not None:
        sys.stderr.write(f"sagetrain: {note}\n")
        sys.stderr.flush()
    os.execv(real, [real, *arguments])


if __name__ == "__main__":
    main(sys.argv[1:], os.environ)
