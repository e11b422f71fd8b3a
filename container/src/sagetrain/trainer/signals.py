"""SIGTERM as a request: the loop finishes its current step, agrees with the other ranks, checkpoints."""

from __future__ import annotations

import signal
import threading
from types import FrameType


class StopRequest:
    """Set by SIGTERM; read by the training loop between steps."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, number: int, _frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(number).name
        self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()
