"""Work every rank on a host would do alike, done by the first of them and read back by the others: a
channel's listing and deal (trainer/channels.py) is the same on all of a host's ranks, and costs a
``stat`` per file; 100,000 files and 8 ranks make 800,000 calls, each a request on a network file system.

The ranks take turns on a lock file in a folder of the launcher's run directory, which the launcher empties
at every start (so nothing there is from another job). The first to hold the lock finds nothing, marks the
lock file as tried, makes the result, and writes it beside the lock before letting go; the others, once
they hold it, take the text and read it after letting go. A ``UserError`` from the first is written
instead, and the others raise it too rather than each making it again, one after another. A rank that
cannot lock the folder, cannot read back what it finds there, or finds a try that left nothing (the
first failed otherwise, or could not write), makes the result itself, without the lock: the outcome is
the same, only slower. No TensorFlow.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TypeVar

from sagetrain.atomic_file import write_atomically
from sagetrain.errors import UserError

T = TypeVar("T")

# Written into the lock file by the rank that makes the result, before it does.
_TRIED = b"tried"


def _locked(path: Path) -> int | None:
    """A descriptor holding an exclusive lock on ``path`` (closing it lets go), or None where this rank
    cannot lock: no such folder, or a file system without locks."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # blocks while another rank makes the result
    except OSError:
        os.close(descriptor)
        return None
    return descriptor


def _left_failure(failure: Path) -> str | None:
    """The sentence of the user error another rank left, if it left one that reads back as one."""
    try:
        sentence = json.loads(failure.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return sentence if isinstance(sentence, str) and sentence else None


def _left_result(result: Path) -> bytes | None:
    try:
        return result.read_bytes()
    except OSError:
        return None


def _first_to_try(lock: int) -> bool:
    """Whether this rank is the first to try making the result (it marks the lock file so); False too
    when it cannot tell, and then makes the result for itself alone."""
    try:
        if os.pread(lock, len(_TRIED), 0) == _TRIED:
            return False
        os.pwrite(lock, _TRIED, 0)
    except OSError:
        return False
    return True


def _make_and_leave(result: Path, failure: Path, make: Callable[[], T], write: Callable[[T], str]) -> T:
    """``make()``'s result, left in ``result`` for the others; its user error's sentence left in
    ``failure`` (as JSON: a sentence may quote a file name that is not UTF-8)."""
    try:
        made = make()
    except UserError as error:
        with suppress(OSError, ValueError):
            write_atomically(failure, json.dumps(str(error)), private=True)
        raise
    with suppress(OSError, ValueError):  # a full disk, say: the others make it themselves
        write_atomically(result, write(made), private=True)
    return made


def once_per_host(
    folder: Path | None,
    name: str,
    make: Callable[[], T],
    *,
    write: Callable[[T], str],
    read: Callable[[str], T],
) -> T:
    """``make()``'s result, made once among the ranks that share ``folder`` and ask for ``name`` (a file
    name without a folder), written with ``write`` and read back with ``read``; with ``folder`` None, or
    one this rank cannot lock in, ``make()`` here."""
    lock = None if folder is None else _locked(folder / f"{name}.lock")
    if folder is None or lock is None:
        return make()
    result, failure = folder / f"{name}.json", folder / f"{name}.failure"
    try:
        sentence = _left_failure(failure)
        if sentence is not None:
            raise UserError(sentence)
        left = _left_result(result)
        if left is None and _first_to_try(lock):
            return _make_and_leave(result, failure, make, write)
    finally:
        os.close(lock)
    if left is None:  # the rank that tried left nothing, or this one cannot tell whether one tried
        return make()
    try:
        return read(left.decode("utf-8"))
    except Exception:  # whatever a damaged or foreign file raises: made here instead
        return make()
