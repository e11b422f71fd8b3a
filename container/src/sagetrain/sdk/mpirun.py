"""``mpirun`` as the SageMaker SDK v3's MPI driver runs it, with ``MPI(process_count_per_node=N)`` meaning
N ranks on every host, as the SDK documents it.

The driver (``mpi_driver.py`` in sagemaker-train 1.27) runs ``mpirun --host h1:N,h2:N -np N … python -m
mpi4py <entry script> …``: N ranks for the whole job, which fill the first host's N slots and leave every
other host idle. Before the driver starts, the image puts a small ``mpirun`` first on the driver's
``PATH`` (``install``); it runs this module, which gives the real ``mpirun`` ``-np`` hosts × N when the
command asks for exactly N on hosts of N slots each and places no ranks itself (``--map-by``, ``-npernode``,
a host file, an ``rmaps_base_*`` MCA parameter…). A command that already asks for hosts × N (a driver that
counts per node itself) or that places its ranks (``mpi_additional_options=["--map-by", "ppr:8:node"]``)
runs as given.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sagetrain.config.mpi_options import RANK_PLACING_MCA_PREFIX, option_key, option_value, places_ranks
from sagetrain.contracts import RunDir

MPIRUN = "mpirun"
# What the driver runs after mpirun's options: the interpreter, then ``-m mpi4py <entry script>``.
_PROGRAM_MARK = ("-m", "mpi4py")
# Open MPI reads an MCA parameter from the environment as OMPI_MCA_<name>.
_MCA_ENV_PREFIX = "OMPI_MCA_"
CORRECTED = (
    "MPI(process_count_per_node={per_node}) asks for {per_node} processes on each host, but the SageMaker "
    "SDK's MPI driver gave mpirun -np {per_node} for the whole job: running {total}, {per_node} on each of "
    "the job's {hosts} hosts"
)


@dataclass(frozen=True)
class MpirunRequest:
    """What an ``mpirun`` command line asks for, as far as placing ranks goes."""

    slots: tuple[int, ...]  # per host named by --host, in order
    processes: int
    places_ranks: bool  # it places its ranks itself (an option, or an MCA parameter in its environment)

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


def _option_starts(options: Sequence[str]) -> list[int]:
    """The index of each option in mpirun's ``options`` (not of their values)."""
    starts, index = [], 0
    while index < len(options):
        if options[index].startswith("-"):
            starts.append(index)
            index += option_key(options, index)[1]
        else:
            index += 1
    return starts


def read_request(options: Sequence[str], environ: Mapping[str, str]) -> MpirunRequest | None:
    """The request in ``mpirun``'s options and environment, or None when they name no hosts or no count.
    Pure."""
    slots: tuple[int, ...] | None = None
    processes: int | None = None
    places = any(name.startswith(_MCA_ENV_PREFIX + RANK_PLACING_MCA_PREFIX) for name in environ)
    for index in _option_starts(options):
        key, value = option_key(options, index)[0], option_value(options, index)
        places = places or places_ranks(key)
        if key == ("flag", "H"):
            slots = _host_slots(value)
        elif key == ("flag", "np") and value.isdigit():
            processes = int(value)
    if slots is None or processes is None:
        return None
    return MpirunRequest(slots, processes, places)


def corrected(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[list[str], str | None]:
    """(``mpirun``'s arguments to run, the line saying what changed or None), from its arguments as the
    driver gave them (without the program name). Unchanged unless they are the shape the SDK's driver
    gives and ask for N ranks in all on hosts of N slots each. Pure."""
    end = _options_end(argv)
    request = read_request(argv[:end], environ) if end is not None else None
    total = request.per_node_processes() if request is not None else None
    if request is None or total is None or end is None:
        return list(argv), None
    fixed = list(argv)
    for index in _option_starts(fixed[:end]):
        if option_key(fixed, index)[0] == ("flag", "np"):
            name, equals, _ = fixed[index].partition("=")
            if equals:
                fixed[index] = f"{name}={total}"
            else:
                fixed[index + 1] = str(total)
    note = CORRECTED.format(per_node=request.slots[0], total=total, hosts=len(request.slots))
    return fixed, note


def install(environ: MutableMapping[str, str], run_dir: RunDir, python: str = sys.executable) -> Path:
    """Put this module's ``mpirun`` first on ``environ``'s PATH (the driver's process); the script's path."""
    folder = run_dir.sdk_mpirun
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
    here = RunDir.from_env(environ).sdk_mpirun
    # Also what mpirun's `-x PATH` forwards to the ranks: without this wrapper.
    environ["PATH"] = os.pathsep.join(_other_entries(environ.get("PATH", ""), here))
    real = shutil.which(MPIRUN, path=environ["PATH"])
    if real is None:
        sys.stderr.write(f"sagetrain: {MPIRUN} is not on PATH ({environ['PATH']})\n")
        raise SystemExit(127)
    arguments, note = corrected(argv, environ)
    if note is not None:
        sys.stderr.write(f"sagetrain: {note}\n")
        sys.stderr.flush()
    # Named as the driver named it: Open MPI takes an mpirun started by its full path for --prefix.
    os.execv(real, [MPIRUN, *arguments])


if __name__ == "__main__":
    main(sys.argv[1:], os.environ)
