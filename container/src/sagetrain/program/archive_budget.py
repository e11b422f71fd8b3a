"""What a code archive may take: the documented limits (hyperparameters ``sagetrain_code_archive_max_bytes``
and ``sagetrain_code_archive_max_members``) and the room on the code folder's volume, and how the members
unpacked so far add up against them. program/archive.py weighs each member's header here before its data is
read. How sizes and member names read in the archive's messages is here too, the lowest of its modules."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from sagetrain.config.hyperparameters import LaunchSettings
from sagetrain.errors import UserError

MiB = 1 << 20
# Kept free on the volume for what a job that then fails still writes (its failure file, its log).
RESERVED_BYTES = 16 * MiB
RESERVED_FILES = 1_000


def size_text(count: int) -> str:
    """A number of bytes as a message says it: "2 MiB", "1.5 GiB", "300 bytes"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{count} bytes"


def shown(name: str) -> str:
    """A member's name as a message shows it: quoted, on one line, cut short when long."""
    return repr(name) if len(name) <= 100 else f"{name[:60]!r}… ({len(name)} characters)"


@dataclass(frozen=True)
class ArchiveLimits:
    """The most a code archive may unpack to (the hyperparameters named in the module's docstring)."""

    max_bytes: int
    max_members: int

    @classmethod
    def of(cls, settings: LaunchSettings) -> ArchiveLimits:
        return cls(settings.code_archive_max_bytes, settings.code_archive_max_members)


DEFAULT_LIMITS = ArchiveLimits.of(LaunchSettings())


@dataclass(frozen=True)
class Room:
    """What the volume a code archive is unpacked on has free, as statvfs (and shutil.disk_usage) says."""

    free_bytes: int
    free_files: int | None  # None: the file system does not count files (btrfs)
    block_size: int

    @classmethod
    def of(cls, folder: Path) -> Room:
        volume = os.statvfs(folder)
        files = volume.f_favail if volume.f_files else None
        return cls(volume.f_bavail * volume.f_frsize, files, volume.f_frsize)


@dataclass(frozen=True)
class Tally:
    """What the members so far add up to."""

    members: int = 0
    size: int = 0  # their data: what sagetrain_code_archive_max_bytes limits
    disk: int = 0  # what they take on the volume: data rounded up to blocks, and a block for each entry

    def plus(self, size: int, block_size: int) -> Tally:
        blocks = -(-size // block_size) + 1
        return Tally(self.members + 1, self.size + size, self.disk + blocks * block_size)


class Excess(Enum):
    MEMBERS = "members"
    SIZE = "size"
    VOLUME_FILES = "volume files"
    VOLUME_BYTES = "volume bytes"


def excess(tally: Tally, limits: ArchiveLimits, room: Room) -> Excess | None:
    """What ``tally`` goes past, the documented limits first; None while it fits."""
    if tally.members > limits.max_members:
        return Excess.MEMBERS
    if tally.size > limits.max_bytes:
        return Excess.SIZE
    if room.free_files is not None and tally.members > room.free_files - RESERVED_FILES:
        return Excess.VOLUME_FILES
    if tally.disk > room.free_bytes - RESERVED_BYTES:
        return Excess.VOLUME_BYTES
    return None


def too_large(archive: str, over: Excess, limits: ArchiveLimits, room: Room, member: str) -> UserError:
    """What the archive going past ``over`` at ``member`` means to the user."""
    at = f"(at {shown(member)})"
    leave_data_out = "leave data out of it (a channel is the place for data) or raise that hyperparameter"
    larger_volume = "give the job a larger volume (VolumeSizeInGB)"
    if over is Excess.MEMBERS:
        key = LaunchSettings.key("code_archive_max_members")
        return UserError(
            f"the code archive {archive} holds more than {limits.max_members:,} members, the limit the "
            f"hyperparameter {key} sets {at}; {leave_data_out}"
        )
    if over is Excess.SIZE:
        key = LaunchSettings.key("code_archive_max_bytes")
        return UserError(
            f"the code archive {archive} unpacks to more than {size_text(limits.max_bytes)} "
            f"({limits.max_bytes:,} bytes), the limit the hyperparameter {key} sets {at}; {leave_data_out}"
        )
    if over is Excess.VOLUME_FILES:
        return UserError(
            f"the code archive {archive} holds more members than the code folder's volume has room for "
            f"{at[:-1]}: {room.free_files or 0:,} files free, of which {RESERVED_FILES:,} stay free for the "
            f"job's log and failure file); {larger_volume} or an archive of fewer files"
        )
    return UserError(
        f"the code archive {archive} unpacks to more than the code folder's volume has room for "
        f"{at[:-1]}: {size_text(room.free_bytes)} free, of which {size_text(RESERVED_BYTES)} stay free for "
        f"the job's log and failure file); {larger_volume} or a smaller archive"
    )
