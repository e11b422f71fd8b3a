"""What the programs saved after the stop signal: the files in the checkpoint folder written since, for
the failure sentence of a stopped job whose program said nothing itself (a user's script)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# A checkpoint folder holds a few files per checkpoint; past this many entries the rest are not looked at.
MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class SavedFiles:
    newest: Path
    count: int


def files_written_since(folder: Path, since: float, max_entries: int = MAX_ENTRIES) -> SavedFiles | None:
    """The newest file under ``folder`` modified at ``since`` (wall clock) or later, and how many such
    files there are; None when there are none. Looks at ``max_entries`` entries at most."""
    newest: tuple[float, Path] | None = None
    count, seen = 0, 0
    pending = [folder]
    while pending and seen < max_entries:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(Path(entry.path))
                        continue
                    modified = entry.stat(follow_symlinks=False).st_mtime
                    if modified >= since:
                        count += 1
                        newest = (
                            max(newest, (modified, Path(entry.path)))
                            if newest
                            else (modified, Path(entry.path))
                        )
        except OSError:
            continue
    return SavedFiles(newest[1], count) if newest is not None else None


def saved_sentence(saved: SavedFiles | None, host: str) -> str:
    """The part of the failure sentence that names what was saved after the signal. Pure."""
    if saved is None:
        return ""
    others = f" and {saved.count - 1} other file{'s' if saved.count > 2 else ''}" if saved.count > 1 else ""
    return f"after it, the program wrote {saved.newest}{others} on host {host}"


@dataclass(frozen=True)
class CheckpointFolder:
    """A host's checkpoint folder (checkpointconfig.json's LocalPath, or SageMaker's default)."""

    path: Path
    host: str

    def saved_since(self, since: float) -> str:
        """The failure sentence's part naming what was written there at ``since`` or later; "" if nothing."""
        return saved_sentence(files_written_since(self.path, since), self.host)
