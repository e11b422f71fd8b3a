"""Pictures of the scaling figures: one PNG per figure, written beside the results (docs/performance.md
shows them). matplotlib (benchmarks/requirements.txt) without a display."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

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
    log_base: int = 2,
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
        axes.set_xscale("log", base=log_base)
    axes.set_title(title)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.grid(True, alpha=0.3)
    axes.set_ylim(bottom=0)
    axes.legend()
    if note:
        figure.text(0.01, 0.01, note, fontsize=7, alpha=0.7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
