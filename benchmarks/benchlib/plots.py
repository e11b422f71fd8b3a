"""Pictures of the scaling figures: one PNG per figure, written beside the results (docs/performance.md
shows them). matplotlib (benchmarks/requirements.txt) without a display."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")  # files only: no display on a build machine
import matplotlib.pyplot as plt

NOTE_CHARACTERS = 150  # a line of the note at the foot of the picture

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
    log_base: int = 2,
    note: str = "",
) -> Path:
    """One line per series, each point its median with its min-max range as an error bar; ``path``."""
    figure, axes = plt.subplots(figsize=(9, 4.2), dpi=110)
    for label, points in series.items():
        ordered = sorted(points)
        xs = [point[0] for point in ordered]
        medians = [point[1] for point in ordered]
        below = [point[1] - point[2] for point in ordered]
        above = [point[3] - point[1] for point in ordered]
        axes.errorbar(xs, medians, yerr=[below, above], marker="o", capsize=3, label=label)
    if log_x:
        axes.set_xscale("log", base=log_base)
        # Ticks at the measured values (2, 4, 8 …), written as numbers rather than powers of the base.
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
    # Beside the axes, not on them: with several series no corner is free of lines.
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    note_lines = textwrap.wrap(note, NOTE_CHARACTERS)
    if note_lines:
        figure.text(0.01, 0.01, "\n".join(note_lines), fontsize=7, alpha=0.7)
    figure.tight_layout(rect=(0, 0.035 * len(note_lines), 1, 1))  # the note below the axes, not on them
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
