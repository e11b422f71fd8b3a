"""Rows of paired samples → medians, ratios and target verdicts; the printed table and the JSON file.

Every row compares "ours" (A) with "theirs" (B), one (A, B) pair per run. The ratio is always
ours / theirs, taken per pair; the table shows the median ratio with its min and max over the pairs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class TargetKind(Enum):
    RATIO_AT_MOST = "ratio <="
    RATIO_AT_LEAST = "ratio >="
    OURS_AT_MOST = "ours <="
    NONE = "none"


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    value: float = 0.0

    def describe(self, unit: str) -> str:
        if self.kind is TargetKind.NONE:
            return "-"
        if self.kind is TargetKind.OURS_AT_MOST:
            return f"ours <= {self.value:g} {unit}"
        return f"{self.kind.value} {self.value:g}x"


NO_TARGET = Target(TargetKind.NONE)


@dataclass(frozen=True)
class Row:
    """One line of the table. ``theirs`` may be a published constant (same value in every pair)."""

    figure: int
    name: str
    ours: str
    theirs: str
    unit: str
    pairs: tuple[tuple[float, float], ...]
    target: Target
    note: str = ""


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))


class Verdict(Enum):
    MET = "met"
    MISSED = "MISSED"
    NO_TARGET = "-"


@dataclass(frozen=True)
class Summary:
    row: Row
    ours: Spread
    theirs: Spread
    ratio: Spread
    verdict: Verdict


def summarise(row: Row) -> Summary:
    if not row.pairs:
        raise ValueError(f"figure {row.figure} {row.name!r} has no samples")
    ours = Spread.of([a for a, _ in row.pairs])
    theirs = Spread.of([b for _, b in row.pairs])
    # A pair whose "theirs" is 0 (a difference of memory that did not grow) has no ratio.
    ratios = [a / b for a, b in row.pairs if b]
    ratio = Spread.of(ratios) if ratios else Spread(math.nan, math.nan, math.nan)
    return Summary(row, ours, theirs, ratio, verdict_of(row.target, ours, ratio))


def verdict_of(target: Target, ours: Spread, ratio: Spread) -> Verdict:
    """Judged on the medians: a single slow pair on a shared machine is reported, not decisive."""
    if target.kind is TargetKind.NONE:
        return Verdict.NO_TARGET
    met = {
        TargetKind.RATIO_AT_MOST: ratio.median <= target.value,
        TargetKind.RATIO_AT_LEAST: ratio.median >= target.value,
        TargetKind.OURS_AT_MOST: ours.median <= target.value,
    }[target.kind]
    return Verdict.MET if met else Verdict.MISSED


def _number(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.01:
        return f"{value:.3f}"
    return f"{value:.4f}"


def _spread_text(spread: Spread) -> str:
    return f"{_number(spread.median)} [{_number(spread.low)}..{_number(spread.high)}]"


TABLE_HEADERS = ("#", "measure", "ours", "theirs", "unit", "ratio ours/theirs", "n", "target", "verdict")


def format_table(summaries: Sequence[Summary]) -> str:
    lines = [TABLE_HEADERS]
    for summary in summaries:
        row = summary.row
        lines.append(
            (
                str(row.figure),
                row.name,
                f"{row.ours}: {_spread_text(summary.ours)}",
                f"{row.theirs}: {_spread_text(summary.theirs)}",
                row.unit,
                _spread_text(summary.ratio),
                str(len(row.pairs)),
                row.target.describe(row.unit),
                summary.verdict.value,
            )
        )
    widths = [max(len(line[column]) for line in lines) for column in range(len(TABLE_HEADERS))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines]
    text.insert(1, "  ".join("-" * width for width in widths))
    notes = [f"  [{s.row.figure}] {s.row.name}: {s.row.note}" for s in summaries if s.row.note]
    legend = "values: median [min..max] over paired runs; ratio taken per pair, then median [min..max]."
    return "\n".join([*text, "", legend, *(["notes:", *notes] if notes else [])])


def summary_document(summary: Summary) -> dict[str, object]:
    row = summary.row
    return {
        "figure": row.figure,
        "measure": row.name,
        "unit": row.unit,
        "ours": {"label": row.ours, **summary.ours.__dict__},
        "theirs": {"label": row.theirs, **summary.theirs.__dict__},
        "ratio_ours_over_theirs": summary.ratio.__dict__,
        "pairs": [list(pair) for pair in row.pairs],
        "target": row.target.describe(row.unit),
        "verdict": summary.verdict.value,
        "note": row.note,
    }


def markdown_table(figures: Sequence[dict]) -> str:
    """The README's table, from the ``figures`` list of a results JSON file."""

    def spread(values: dict) -> str:
        return f"{_number(values['median'])} [{_number(values['low'])}..{_number(values['high'])}]"

    lines = [
        "| # | measure | ours | theirs | ratio ours/theirs | target | verdict |",
        "|---|---------|------|--------|-------------------|--------|---------|",
    ]
    for figure in figures:
        unit = figure["unit"]
        cells = [
            str(figure["figure"]),
            figure["measure"],
            f"{figure['ours']['label']}: {spread(figure['ours'])} {unit}",
            f"{figure['theirs']['label']}: {spread(figure['theirs'])} {unit}",
            spread(figure["ratio_ours_over_theirs"]),
            figure["target"],
            figure["verdict"],
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)
