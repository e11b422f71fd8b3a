"""Figure 3: rendezvous, 2 hosts — all containers started → all ranks running (see cluster_timing)."""

from __future__ import annotations

from benchlib.context import Context
from benchlib.report import NO_TARGET, Row

from figures.cluster_timing import paired_timings

NUMBER = 3
TITLE = "rendezvous, 2 hosts (all containers started -> all ranks in MPI)"


def samples(ctx: Context) -> list[Row]:
    pairs = tuple((ours.rendezvous, aws.rendezvous) for ours, aws in paired_timings(ctx))
    return [Row(NUMBER, TITLE, "sagetrain", "AWS toolkit MPI", "s", pairs, NO_TARGET)]
