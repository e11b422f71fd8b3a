"""Checkpoints: the model's and the optimizer's variables plus where training stood, one ``.npz`` each.

Written by rank 0 only, atomically (a temporary file in the same folder, fsync, rename), so SageMaker's
upload of ``/opt/ml/checkpoints`` never sees half a file. Only rank 0 reads one on start; the state then
reaches the other ranks by broadcast, so hosts need not share the folder. No TensorFlow here.

A file is named by its position as people count it, the 1-based epoch and the last step completed in it:
``sagetrain-epoch000012-step00000006.npz`` holds epoch 12 after its step 6, and the end of epoch 11 of 40
steps is ``sagetrain-epoch000011-step00000040.npz``. Older images named the same position by epochs
completed and steps into the next (``…epoch000011-step00000006`` for the first, ``…epoch000011-step00000000``
for the second), so a name alone is ambiguous: which checkpoint is the latest, and where it stands, is
always read from the metadata inside.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sagetrain.errors import UserError

FORMAT_VERSION = 1
_NAME = re.compile(r"^sagetrain-epoch\d{6}-step\d{8}\.npz$")
KEEP_LATEST = 2
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile)


@dataclass(frozen=True, order=True)
class Progress:
    """Where training stands: epochs fully done, and steps done in the next one (after a SIGTERM)."""

    epochs_completed: int
    steps_into_epoch: int

    @classmethod
    def after_step(cls, epoch: int, step: int, steps: int) -> Progress:
        """The progress once ``step`` of the ``steps`` of 1-based ``epoch`` is done."""
        return cls(epoch, 0) if step >= steps else cls(epoch - 1, step)

    def position(self, steps: int | None) -> Position:
        """This progress as people count it, in a job of ``steps`` steps per epoch (None: not known)."""
        if self.steps_into_epoch:
            return Position(self.epochs_completed + 1, self.steps_into_epoch, steps)
        return Position(self.epochs_completed, steps, steps)


@dataclass(frozen=True)
class Position:
    """A checkpoint's place as every name and message spells it: the 1-based epoch, the last step
    completed in it, the steps of that epoch. ``step`` and ``steps`` are None at the end of an epoch of a
    checkpoint that older images wrote, which did not record its steps."""

    epoch: int
    step: int | None
    steps: int | None

    def describe(self) -> str:
        """``epoch 12, step 6 of 40``."""
        if self.step is None:
            return f"the end of epoch {self.epoch}"
        of = f" of {self.steps}" if self.steps is not None else ""
        return f"epoch {self.epoch}, step {self.step}{of}"


@dataclass(frozen=True)
class CheckpointMeta:
    progress: Progress
    seed: int
    ranks: int
    global_batch_size: int
    # Steps per epoch of the job that wrote it; None in checkpoints of older images.
    steps_per_epoch: int | None = None

    @property
    def position(self) -> Position:
        return self.progress.position(self.steps_per_epoch)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT_VERSION, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CheckpointMeta:
        data = json.loads(text)
        if data.get("format") != FORMAT_VERSION:
            raise ValueError(f"checkpoint format {data.get('format')!r}, expected {FORMAT_VERSION}")
        steps = data.get("steps_per_epoch")
        return cls(
            progress=Progress(**data["progress"]),
            seed=int(data["seed"]),
            ranks=int(data["ranks"]),
            global_batch_size=int(data["global_batch_size"]),
            steps_per_epoch=int(steps) if steps is not None else None,
        )


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    meta: CheckpointMeta
    model_values: tuple[np.ndarray, ...]
    optimizer_values: tuple[np.ndarray, ...]


def checkpoint_name(position: Position) -> str:
    if position.step is None:
        raise ValueError(f"a checkpoint is named by its epoch and step, and {position} has no step")
    return f"sagetrain-epoch{position.epoch:06d}-step{position.step:08d}.npz"


def written_note(path: Path | str, position: Position) -> str:
    """Rank 0's line for each checkpoint it writes."""
    return f"wrote the checkpoint {path} ({position.describe()})"


def stop_message(path: Path | str, position: Position, host: str | None) -> str:
    """What every rank reports after a SIGTERM: who wrote which checkpoint, holding what."""
    writer = f"rank 0 (host {host})" if host else "rank 0"
    return f"{writer} wrote the checkpoint {path} ({position.describe()}) after SIGTERM"


def _unreadable(path: Path, error: BaseException) -> UserError:
    return UserError(
        f"checkpoint {path} cannot be read ({error}); delete it to start over or restore a good copy."
    )


def read_meta(path: Path) -> CheckpointMeta:
    """The metadata alone (one small member of the archive, whatever the size of the variables)."""
    try:
        with np.load(path, allow_pickle=False) as arrays:
            return CheckpointMeta.from_json(str(arrays["meta"]))
    except _UNREADABLE as error:
        raise _unreadable(path, error) from None


def _named(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return [path for path in directory.iterdir() if _NAME.match(path.name)]


def _oldest_first(found: list[tuple[Progress, Path]]) -> list[Path]:
    # Ties (the end of one epoch written by an older image and by this one) go to the later name, which
    # is this image's: it also records the steps per epoch.
    return [path for _, path in sorted(found, key=lambda item: (item[0], item[1].name))]


def checkpoints_in(directory: Path) -> list[Path]:
    """Our checkpoint files in ``directory``, oldest first by the progress each holds; one that cannot
    be read is a UserError naming it."""
    return _oldest_first([(read_meta(path).progress, path) for path in _named(directory)])


def latest_checkpoint(directory: Path) -> Path | None:
    found = checkpoints_in(directory)
    return found[-1] if found else None


def _prune(directory: Path, keep: int) -> None:
    """Delete all but the latest ``keep``; a file that cannot be read is left for the next start to name."""
    found = []
    for path in _named(directory):
        try:
            found.append((read_meta(path).progress, path))
        except UserError:
            continue
    for stale in _oldest_first(found)[:-keep]:
        stale.unlink(missing_ok=True)


def write_checkpoint(
    directory: Path,
    meta: CheckpointMeta,
    model_values: Sequence[np.ndarray],
    optimizer_values: Sequence[np.ndarray],
    keep: int = KEEP_LATEST,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / checkpoint_name(meta.position)
    temporary = directory / f".{final.name}.partial-{os.getpid()}"
    arrays: dict[str, Any] = {"meta": np.array(meta.to_json())}
    arrays.update({f"model_{index:05d}": np.asarray(value) for index, value in enumerate(model_values)})
    arrays.update(
        {f"optimizer_{index:05d}": np.asarray(value) for index, value in enumerate(optimizer_values)}
    )
    with temporary.open("wb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(final)
    if keep > 0:
        _prune(directory, keep)
    return final


def read_checkpoint(path: Path) -> Checkpoint:
    try:
        with np.load(path, allow_pickle=False) as arrays:
            meta = CheckpointMeta.from_json(str(arrays["meta"]))
            model = tuple(arrays[key] for key in sorted(arrays.files) if key.startswith("model_"))
            optimizer = tuple(arrays[key] for key in sorted(arrays.files) if key.startswith("optimizer_"))
    except _UNREADABLE as error:
        raise _unreadable(path, error) from None
    return Checkpoint(path, meta, model, optimizer)


def check_matches(
    checkpoint: Checkpoint,
    model_shapes: Sequence[tuple[int, ...]],
    optimizer_shapes: Sequence[tuple[int, ...]],
) -> None:
    """A checkpoint from another model would silently load garbage; refuse it by name."""
    for kind, values, shapes in (
        ("model", checkpoint.model_values, model_shapes),
        ("optimizer", checkpoint.optimizer_values, optimizer_shapes),
    ):
        saved = [tuple(value.shape) for value in values]
        if saved != [tuple(shape) for shape in shapes]:
            raise UserError(
                f"checkpoint {checkpoint.path} holds {kind} variables of shapes {saved[:4]}… but the model "
                f"built by build_model has {[tuple(shape) for shape in shapes][:4]}…; it belongs to another "
                f"model: delete it, or use a new checkpoint folder."
            )
