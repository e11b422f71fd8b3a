"""Figures 13 and 14: the readers of one side start their timed passes together, so each side's
records/s is every reader's records over the time until the last one finished, with no reader timing
its passes while another is still starting (importing TensorFlow, listing, counting) beside it.

A barrier through named pipes in a folder every host's container mounts: each reader, once warmed up,
makes its own ``go-<side>-<name>`` pipe, writes its name into ``ready-<side>`` and blocks opening its
``go`` pipe; channel_job.py on the first host reads every reader's name, then opens each ``go`` pipe
(which returns once that reader has opened it) and closes it: the reader reads nothing, and goes. Pipes
rather than polling a folder: each side wakes the moment the other acts.
"""

import contextlib
import os
import select
from collections.abc import Iterable
from pathlib import Path

FOLDER_VAR = "BENCH_START_TOGETHER_DIR"


def _make_pipe(path: Path) -> None:
    with contextlib.suppress(FileExistsError):  # the other side, or an earlier reader, made it first
        os.mkfifo(path)


def wait_for_the_others(side: str, name: str) -> None:
    """Reader ``name`` of ``side`` is ready; returns once every reader of the side is (no-op without the
    folder, e.g. when a payload runs on its own)."""
    folder = os.environ.get(FOLDER_VAR)
    if not folder:
        return
    go = Path(folder) / f"go-{side}-{name}"
    _make_pipe(go)
    ready = Path(folder) / f"ready-{side}"
    _make_pipe(ready)
    with ready.open("w") as pipe:
        pipe.write(f"{name}\n")
    with go.open() as pipe:
        pipe.read()


def release_together(folder: Path, side: str, names: Iterable[str], timeout_s: float) -> None:
    """Wait until every reader of ``names`` has said it is ready, then let them all go; TimeoutError when
    one has not said so within ``timeout_s`` (it died before its timed passes)."""
    ready = folder / f"ready-{side}"
    _make_pipe(ready)
    expected = set(names)
    waiting, text = set(expected), b""
    # Opened for reading and writing: the pipe never reads as ended between two readers' writes.
    descriptor = os.open(ready, os.O_RDWR)
    try:
        while waiting:
            if not select.select([descriptor], [], [], timeout_s)[0]:
                raise TimeoutError(f"readers {sorted(waiting)} of {side} not ready after {timeout_s:g} s")
            text += os.read(descriptor, 4096)
            *lines, text = text.split(b"\n")
            waiting -= {line.decode() for line in lines}
    finally:
        os.close(descriptor)
    for name in sorted(expected):
        with (folder / f"go-{side}-{name}").open("w"):
            pass
