"""Rank 0's progress lines within a long epoch: at most one every PROGRESS_INTERVAL_SECONDS, none in an
epoch shorter than that. Pure but for the clock it is handed: one clock read per step is all it costs on
the hot path, and it needs no collective (the global samples of a step are arithmetic on the shard
sizes every rank already knows)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Long enough that a job's log stays readable, short enough that a stalled epoch shows within a minute.
PROGRESS_INTERVAL_SECONDS = 30.0


@dataclass(frozen=True)
class EpochPlace:
    """Which epoch of how many, with how many steps."""

    epoch: int
    epochs: int
    steps: int


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def rate(samples_per_second: float) -> str:
    return f"{samples_per_second:.0f}" if samples_per_second >= 100 else f"{samples_per_second:.3g}"


def progress_line(place: EpochPlace, step: int, samples_per_second: float, over: float, left: float) -> str:
    """``epoch 3 of 10, step 120 of 400: 5120 samples/s over the last 31 s, about 1 min 27 s left in
    this epoch``."""
    return (
        f"epoch {place.epoch} of {place.epochs}, step {step} of {place.steps}: "
        f"{rate(samples_per_second)} samples/s over the last {duration(over)}, "
        f"about {duration(left)} left in this epoch"
    )


class EpochProgress:
    """Decides, after each step of one epoch, whether a progress line is due and says it.

    ``samples_through(step)`` is the global samples of the epoch's first ``step`` steps; ``first_step``
    the steps already done when the epoch (re)started; ``clock`` a monotonic clock in seconds.
    """

    def __init__(
        self,
        place: EpochPlace,
        samples_through: Callable[[int], int],
        first_step: int,
        clock: Callable[[], float],
        interval: float = PROGRESS_INTERVAL_SECONDS,
    ) -> None:
        self._place, self._samples_through, self._clock, self._interval = (
            place,
            samples_through,
            clock,
            interval,
        )
        self._since, self._since_step = clock(), first_step

    def after_step(self, step: int) -> str | None:
        """The line to print once ``step`` is done, or None. The last step has none: the epoch line
        follows it."""
        if step >= self._place.steps:
            return None
        now = self._clock()
        elapsed = now - self._since
        if elapsed < self._interval or step <= self._since_step:
            return None
        samples = self._samples_through(step) - self._samples_through(self._since_step)
        seconds_per_step = elapsed / (step - self._since_step)
        line = progress_line(
            self._place, step, samples / elapsed, elapsed, (self._place.steps - step) * seconds_per_step
        )
        self._since, self._since_step = now, step
        return line
