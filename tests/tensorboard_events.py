"""What TensorBoard shows of a log folder, read with TensorBoard's own reader (the `tensorboard` package:
in the image, and in the test runner's environment)."""

from __future__ import annotations

from pathlib import Path


def event_tags(folder: Path) -> dict[str, dict[str, list[int]]]:
    """{run: {tag: steps}} for ``folder`` and each folder below it that holds event files (a run, as
    TensorBoard names it: ``train``, ``validation``, ``.`` for ``folder`` itself)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = {}
    for run in sorted({path.parent for path in folder.rglob("events.out.tfevents.*")}):
        accumulator = EventAccumulator(str(run), size_guidance={"tensors": 0})
        accumulator.Reload()
        tags = accumulator.Tags()["tensors"]
        runs[str(run.relative_to(folder))] = {tag: [e.step for e in accumulator.Tensors(tag)] for tag in tags}
    return runs


def event_files(folder: Path) -> list[Path]:
    """Every TensorBoard event file below ``folder`` (none when it does not exist)."""
    return sorted(folder.rglob("events.out.tfevents.*")) if folder.is_dir() else []
