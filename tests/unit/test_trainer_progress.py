"""Rank 0's progress lines within an epoch, on a clock the test moves."""

import pytest
from sagetrain.trainer.progress import (
    PROGRESS_INTERVAL_SECONDS,
    EpochPlace,
    EpochProgress,
    duration,
    progress_line,
    rate,
)

PLACE = EpochPlace(epoch=3, epochs=10, steps=400)


class Clock:
    """A monotonic clock that reads what the test set, and counts its reads."""

    def __init__(self, now=100.0):
        self.now, self.reads = now, 0

    def __call__(self):
        self.reads += 1
        return self.now


def per_step(samples):
    return lambda step: step * samples


def test_the_interval_is_thirty_seconds():
    assert PROGRESS_INTERVAL_SECONDS == 30.0


def test_no_line_before_thirty_seconds_then_one_per_thirty_seconds():
    clock = Clock()
    progress = EpochProgress(PLACE, per_step(128), first_step=0, clock=clock)
    lines = {}
    for step in range(1, 400):
        clock.now += 0.25  # 4 steps a second: 512 samples/s
        if (line := progress.after_step(step)) is not None:
            lines[step] = line
    assert clock.reads == 400, "one clock read at start, one per step"
    assert list(lines) == [120, 240, 360]
    assert lines[120] == (
        "epoch 3 of 10, step 120 of 400: 512 samples/s over the last 30 s, about 1 min 10 s left in "
        "this epoch"
    )
    assert lines[360] == (
        "epoch 3 of 10, step 360 of 400: 512 samples/s over the last 30 s, about 10 s left in this epoch"
    )


def test_an_epoch_shorter_than_the_interval_prints_nothing_and_the_last_step_never_does():
    clock = Clock()
    short = EpochProgress(EpochPlace(1, 2, 100), per_step(32), first_step=0, clock=clock)
    for step in range(1, 101):
        clock.now += 0.29
        assert short.after_step(step) is None
    clock = Clock()
    two_steps = EpochProgress(EpochPlace(1, 1, 2), per_step(32), first_step=0, clock=clock)
    clock.now += 29.9
    assert two_steps.after_step(1) is None
    clock.now += 60
    assert two_steps.after_step(2) is None, "the epoch line follows the last step"


def test_the_rate_is_over_the_last_interval_and_global_samples():
    clock = Clock()
    # Uneven global steps (the ranks' batches as dealt): 100 samples a step, then 10.
    samples = [0, *range(100, 1001, 100), *range(1010, 1101, 10)]
    progress = EpochProgress(EpochPlace(1, 1, 20), samples.__getitem__, first_step=0, clock=clock)
    clock.now += 40
    assert progress.after_step(10) == (
        "epoch 1 of 1, step 10 of 20: 25 samples/s over the last 40 s, about 40 s left in this epoch"
    )
    clock.now += 20
    assert progress.after_step(15) is None
    clock.now += 10
    assert progress.after_step(16) == (
        "epoch 1 of 1, step 16 of 20: 2 samples/s over the last 30 s, about 20 s left in this epoch"
    )


def test_a_resumed_epoch_counts_from_the_step_it_resumed_at():
    clock = Clock()
    progress = EpochProgress(EpochPlace(12, 40, 4000), per_step(64), first_step=3000, clock=clock)
    clock.now += 45
    assert progress.after_step(3090) == (
        "epoch 12 of 40, step 3090 of 4000: 128 samples/s over the last 45 s, about 7 min 35 s left in "
        "this epoch"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (59.4, "59 s"), (59.6, "1 min 00 s"), (125, "2 min 05 s"), (3600, "1 h 00 min"),
     (7625, "2 h 07 min"), (-1, "0 s")],
)  # fmt: skip
def test_durations(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("value", "text"), [(5120.4, "5120"), (100, "100"), (99.5, "99.5"), (2.0, "2"), (0.01234, "0.0123")]
)
def test_rates(value, text):
    assert rate(value) == text


def test_progress_line():
    assert progress_line(EpochPlace(2, 5, 40), 6, 1234.5, 31.2, 95) == (
        "epoch 2 of 5, step 6 of 40: 1234 samples/s over the last 31 s, about 1 min 35 s left in this epoch"
    )
