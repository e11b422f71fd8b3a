"""Figures 13 and 14: barriers between the processes of a job's containers, so that each side's readers
start their timed passes together and no host begins its next side while another still times this one.
Then a side's records/s is every reader's records over the time until the last one finished, with no
reader timing its passes beside another that is still starting (importing TensorFlow, listing, counting).

Named pipes in a folder every host's container mounts (they work between containers because the
simulated hosts share one kernel): each waiting process makes its own ``go-<round>-<name>`` pipe, writes
its name into ``ready-<round>`` and blocks opening its ``go`` pipe; the releasing process (channel_job.py
on the first host) reads every name, then opens each ``go`` pipe (which returns once that process has
opened it) and closes it: the waiting process reads nothing, and goes. Pipes rather than polling a
folder: each side wakes the moment the other acts.
"""

import contextlib
import os
import select
import time
from collections.abc import Iterable
from pathlib import Path

FOLDER_VAR = "BENCH_START_TOGETHER_DIR"


def _make_pipe(path: Path) -> None:
    with contextlib.suppress(FileExistsError):  # the releasing side, or another waiting one, made it first
        os.mkfifo(path)


def wait_for_the_others(folder: Path, round_name: str, name: str) -> None:
    """``name`` is ready for ``round_name``; returns once the releasing process lets every one go."""
    go = folder / f"go-{round_name}-{name}"
    _make_pipe(go)
    ready = folder / f"ready-{round_name}"
    _make_pipe(ready)
    with ready.open("w") as pipe:
        pipe.write(f"{name}\n")
    with go.open() as pipe:
        pipe.read()


def reader_waits(side: str, name: str) -> None:
    """A reader of ``side`` is warmed up: wait for the side's other readers in the folder channel_job.py
    names (no wait without it, e.g. when a payload runs on its own)."""
    folder = os.environ.get(FOLDER_VAR)
    if folder:
        wait_for_the_others(Path(folder), side, name)


def release_together(folder: Path, round_name: str, names: Iterable[str], timeout_s: float) -> None:
    """Wait until every one of ``names`` is ready for ``round_name``, then let them all go; TimeoutError
    when one has not said so within ``timeout_s`` (it died first)."""
    ready = folder / f"ready-{round_name}"
    _make_pipe(ready)
    expected = set(names)
    waiting, text = set(expected), b""
    end = time.monotonic() + timeout_s
    # Opened for reading and writing: the pipe never reads as ended between two writers.
    descriptor = os.open(ready, os.O_RDWR)
    try:
        while waiting:
            left = end - time.monotonic()
            if left <= 0 or not select.select([descriptor], [], [], left)[0]:
                raise TimeoutError(f"{sorted(waiting)} not ready for {round_name} after {timeout_s:g} s")
            text += os.read(descriptor, 4096)
            *lines, text = text.split(b"\n")
            waiting -= {line.decode() for line in lines}
    finally:
        os.close(descriptor)
    for name in sorted(expected):
        with (folder / f"go-{round_name}-{name}").open("w"):
            pass
