"""Pictures of the scaling figures: one PNG per figure, written beside the results (docs/performance.md
shows them). matplotlib (benchmarks/requirements.txt) without a display."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")  # files only: no display on a build machine
import matplotlib.pyplot as plt

# (x, median, low, high): a point with the spread of its paired runs.
Point = tuple[float, float, float, float]


def scaling_plot(
    path: Path,
    title: str,
    x_label: str,
    y_label: str,
    series: Mapping[str, Sequence[Point]],
    *,
    log_x: bool = False,
    log_y: bool = False,
    note: str = "",
) -> Path:
    """One line per series, each point its median with its min-max range as an error bar; ``path``."""
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, points in series.items():
        ordered = sorted(points)
        xs = [point[0] for point in ordered]
        medians = [point[1] for point in ordered]
        below = [point[1] - point[2] for point in ordered]
        above = [point[3] - point[1] for point in ordered]
        axes.errorbar(xs, medians, yerr=[below, above], marker="o", capsize=3, label=label)
    if log_x:
        axes.set_xscale("log", base=2)
        # Ticks at the measured values (2, 4, 8 …), written as numbers rather than powers of 2.
        axes.set_xticks(sorted({point[0] for points in series.values() for point in points}))
        axes.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    if log_y:  # series an order of magnitude apart (a 30 s sleep against a second) stay readable
        axes.set_yscale("log")
    else:
        axes.set_ylim(bottom=0)
    axes.set_title(title)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, framealpha=0.8)  # five series must leave the lines readable
    if note:
        figure.text(0.01, 0.01, note, fontsize=7, alpha=0.7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
