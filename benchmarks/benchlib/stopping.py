"""Ctrl-C and SIGTERM during a benchmark run: they become ``Stopped`` in the main thread, so the run's
``finally`` removes every container and network it created; the removal itself is not interrupted."""

from __future__ import annotations

import signal
from collections.abc import Callable


class Stopped(Exception):
    """SIGINT or SIGTERM arrived; ``signum`` says which (the message is its name)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def raise_stopped_on_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_stopped)


def shield_cleanup() -> None:
    """Ignore a second Ctrl-C: the cleanup that follows must run to its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def until_stopped(
    work: Callable[[], int], cleanup: Callable[[], None], say: Callable[[str], None], who: str
) -> int:
    """``work()``'s exit code, or 128 + the signal's number when Ctrl-C or SIGTERM stopped it (``say`` tells
    that ``cleanup`` removes what ``who`` created). ``cleanup`` runs on every way out, shielded from a
    second Ctrl-C; the default handlers are back once it has run."""
    raise_stopped_on_signals()
    try:
        return work()
    except Stopped as stop:
        say(f"{stop} received: removing what {who} created")
        return 128 + stop.signum
    finally:
        shield_cleanup()
        cleanup()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
