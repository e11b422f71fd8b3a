"""Figure 11: rendezvous and teardown against the number of hosts, 2 to 32 — the jobs of figures 2 and 3
(cluster_timing: one mpi4py rank per host, no TensorFlow in the payload) at every host count, our
launcher against AWS's toolkit MPI path.

The time a job takes to meet is split in three. Docker's part: `docker start` issued → the last
container started (the engine starts a job's containers one after another). Ours, the launch: the last
container started → every rank's first line (our launcher, the hosts' handshakes, sshd, mpirun reaching
each host). MPI's: → every rank past a barrier (mpi4py's import, MPI_Init). "Per host" is the
least-squares slope of the medians over the host counts: what one more host adds, the start-up every
job pays once left out. The target is ours <= 50 ms per host; it is reported, not enforced. The note of
that row gives each host count's three parts divided by its hosts.

Every simulated host shares this machine's CPUs: a host's Python, sshd, orted and rank all queue for
the same cores, so the slope here is an upper bound of what one more machine adds on SageMaker.

The larger jobs get fewer pairs (RUNS_AT_MOST): AWS's side sleeps 30 s at the end of every job and
imports TensorFlow on every host, so a 32-host pair takes minutes on 2 cores. The plot,
figure-11-hosts.png, goes to benchmarks/plots/ with the other figures' pictures.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

from benchlib.context import Context
from benchlib.plots import Point, scaling_plot
from benchlib.report import NO_TARGET, Row, Target, TargetKind

from figures.cluster_timing import Timing, paired_timings

NUMBER = 11
TITLE = "hosts: rendezvous and teardown at 2 to 32 hosts, and our part per host"
HOST_COUNTS = (2, 4, 8, 16, 32)
RUNS_AT_MOST = {2: 5, 4: 3, 8: 3, 16: 2, 32: 1}
TARGET_MS_PER_HOST = 50.0
PLOT = "figure-11-hosts.png"

Pairs = Mapping[int, Sequence[tuple[Timing, Timing]]]  # host count → (ours, aws) per run


def runs_at(hosts: int, runs: int) -> int:
    """Pairs at ``hosts`` hosts when the run asks for ``runs``: never more than RUNS_AT_MOST allows."""
    return max(1, min(runs, RUNS_AT_MOST.get(hosts, runs)))


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of y over x. Pure."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        raise ValueError(f"a slope needs two different x values, got {xs}")
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return covariance / sum((x - mean_x) ** 2 for x in xs)


def medians(pairs: Pairs, side: int, measure: Callable[[Timing], float]) -> list[tuple[float, float]]:
    """(host count, median of ``measure``) on one side (0 ours, 1 AWS)."""
    return [(hosts, statistics.median(measure(pair[side]) for pair in runs)) for hosts, runs in pairs.items()]


def points(pairs: Pairs, side: int, measure: Callable[[Timing], float]) -> list[Point]:
    """(host count, median, min, max) of ``measure`` on one side, for the plot."""
    spread = []
    for hosts, runs in pairs.items():
        values = [measure(pair[side]) for pair in runs]
        spread.append((float(hosts), statistics.median(values), min(values), max(values)))
    return spread


def _rendezvous(timing: Timing) -> float:
    return timing.rendezvous


def _teardown(timing: Timing) -> float:
    return timing.teardown


def _containers_up(timing: Timing) -> float:
    return timing.containers_up


def _launch(timing: Timing) -> float:
    return timing.launch


def _mpi(timing: Timing) -> float:
    return timing.rendezvous - timing.launch


SPLIT = (("Docker", _containers_up), ("ours", _launch), ("MPI", _mpi))


def split_note(pairs: Pairs) -> str:
    """Each host count's three parts divided by its hosts (our jobs' medians)."""
    parts = {name: dict(medians(pairs, 0, measure)) for name, measure in SPLIT}
    cells = [
        f"{hosts} hosts " + " + ".join(f"{1000 * parts[name][hosts] / hosts:.0f}" for name, _ in SPLIT)
        for hosts in sorted(pairs)
    ]
    runs = ", ".join(f"{hosts}: {len(pairs[hosts])}" for hosts in sorted(pairs))
    return (
        f"slopes of the medians over {len(pairs)} host counts; time / hosts in our jobs, ms, "
        f"{' + '.join(name for name, _ in SPLIT)}: {'; '.join(cells)}; pairs per host count {runs}"
    )


def slope_row(name: str, measure: Callable[[Timing], float], pairs: Pairs, target: Target, note: str) -> Row:
    values = (1000 * slope(medians(pairs, 0, measure)), 1000 * slope(medians(pairs, 1, measure)))
    return Row(NUMBER, name, "sagetrain", "AWS toolkit MPI", "ms/host", (values,), target, note)


def per_host_rows(pairs: Pairs) -> list[Row]:
    target = Target(TargetKind.OURS_AT_MOST, TARGET_MS_PER_HOST)
    return [
        slope_row("ours per host: launch (last container started -> ranks' first line), slope", _launch,
                  pairs, target, split_note(pairs)),
        slope_row("MPI per host: ranks' first line -> past a barrier, slope", _mpi, pairs, NO_TARGET, ""),
        slope_row("Docker per host: start issued -> last container started, slope", _containers_up, pairs,
                  NO_TARGET, "the two columns are Docker starting our containers and AWS's"),
        slope_row("rendezvous per host (launch + MPI), slope", _rendezvous, pairs, NO_TARGET, ""),
    ]  # fmt: skip


def per_count_rows(pairs: Pairs) -> list[Row]:
    rows = []
    for hosts in sorted(pairs):
        for name, measure in (("rendezvous", _rendezvous), ("teardown", _teardown)):
            values = tuple((measure(ours), measure(aws)) for ours, aws in pairs[hosts])
            rows.append(
                Row(NUMBER, f"{name}, {hosts} hosts", "sagetrain", "AWS toolkit MPI", "s", values, NO_TARGET)
            )
    return rows


def plot(ctx: Context, pairs: Pairs) -> None:
    series = {
        "sagetrain rendezvous": points(pairs, 0, _rendezvous),
        "AWS toolkit rendezvous": points(pairs, 1, _rendezvous),
        "sagetrain teardown": points(pairs, 0, _teardown),
        "AWS toolkit teardown": points(pairs, 1, _teardown),
        "sagetrain launch (ranks' first line)": points(pairs, 0, _launch),
        "Docker: containers up (our jobs)": points(pairs, 0, _containers_up),
    }
    path = scaling_plot(
        ctx.plots_dir / PLOT, "Rendezvous and teardown against hosts (one rank per host)", "hosts",
        "seconds (log scale)", series, log_x=True, log_y=True,
        note="median of paired runs, bars min..max; from the last container started: rendezvous to every "
        "rank past a barrier, launch to every first line; teardown: last rank exit -> containers exited",
    )  # fmt: skip
    ctx.say(f"figure {NUMBER}: plot written to {path}")


def samples(ctx: Context) -> list[Row]:
    pairs = {hosts: paired_timings(ctx, hosts, runs_at(hosts, ctx.runs)) for hosts in HOST_COUNTS}
    plot(ctx, pairs)
    return [*per_host_rows(pairs), *per_count_rows(pairs)]
