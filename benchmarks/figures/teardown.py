"""Figure 2: teardown, 2 hosts — last rank exit → all containers exited (see cluster_timing)."""

from __future__ import annotations

from benchlib.context import Context
from benchlib.report import Row, Target, TargetKind

from figures.cluster_timing import paired_timings

NUMBER = 2
TITLE = "teardown, 2 hosts (last rank exit -> all containers exited)"


def samples(ctx: Context) -> list[Row]:
    pairs = tuple((ours.teardown, aws.teardown) for ours, aws in paired_timings(ctx))
    target = Target(TargetKind.OURS_AT_MOST, 3.0)
    return [Row(NUMBER, TITLE, "sagetrain", "AWS toolkit MPI", "s", pairs, target)]
