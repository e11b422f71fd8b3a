"""Unpacking the code archive (``sagemaker_submit_directory``): nothing in it lands outside the folder it
is unpacked into, brings what a code folder has no use for, or takes more room than it may.

Refused, with one sentence naming the member: absolute names, ``..`` in a name, a link that leads outside
the folder, a member written through such a link, links that loop, device files and FIFOs, set-user-ID /
set-group-ID bits, sparse files, a name longer than the volume allows, a file over a folder and a folder
over a file. Links are resolved through what is on disk as extraction goes, as if the folder were ``/``:
a chain of links that only together leads outside is caught, and so is one that leaves the folder and
comes back in by its name (a name that changes when the folder is moved into place).

Bounded while streaming: each member's header is weighed before its data is read, against the documented
limits (hyperparameters ``sagetrain_code_archive_max_bytes`` and ``sagetrain_code_archive_max_members``)
and the room on the folder's volume. What tarfile would read whole into memory (an extended header larger
than any real one, a sparse map) is refused before it does. A damaged archive (a bad header, data
missing, a checksum that does not match, data after the end) is refused too.

After a refusal the folder holds part of the archive: the caller unpacks into a folder of its own and
discards it (program/code.py).
"""

from __future__ import annotations

import errno
import functools
import lzma
import os
import stat
import tarfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath

# What tarfile raises for a zero block (the end of the archive) and for a header cut off; undocumented,
# so not in typeshed.
from tarfile import EmptyHeaderError, EOFHeaderError, TruncatedHeaderError  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, TypeVar

from sagetrain.config.hyperparameters import LaunchSettings
from sagetrain.errors import PlatformError, SagetrainError, UserError

if TYPE_CHECKING:
    from typing import Self  # Python 3.11

MiB = 1 << 20
# Kept free on the volume for what a job that then fails still writes (its failure file, its log).
RESERVED_BYTES = 16 * MiB
RESERVED_FILES = 1_000
# tarfile reads a GNU long name or a pax header whole into memory; real ones hold a few hundred bytes.
# It reads a chain of them recursively, so Python's recursion limit (RecursionError, refused as an
# unreadable archive) bounds a chain to about a thousand: 64 MiB held at the most.
MAX_EXTENDED_HEADER = 64 << 10
# Only zeros may follow the end-of-archive block (padding to a record: 10 KiB as tar and tarfile write
# it); this much is read to check it, and for a compressed archive to reach its checksum.
MAX_TRAILER = 16 * MiB
CHUNK = 1 * MiB
# As Linux (MAXSYMLINKS): more links than this in one path is taken for a loop.
MAX_LINK_HOPS = 40
_EXTENDED_HEADERS = (
    tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
)  # fmt: skip
# What reading a damaged archive raises: tarfile's errors, the decompressors' (gzip's and bz2's are
# OSError), and a number or name tarfile could not parse.
_READ_ERRORS = (tarfile.TarError, EOFError, OSError, ValueError, zlib.error, lzma.LZMAError, RecursionError)
# Errors writing a member that come from the volume rather than from the archive.
VOLUME_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_VOLUME_BROKEN = frozenset({errno.EIO, errno.EROFS})

T = TypeVar("T")


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{count} bytes"


def _shown(name: str) -> str:
    """A member's name for a message: quoted, on one line, cut short when long."""
    return repr(name) if len(name) <= 100 else f"{name[:60]!r}… ({len(name)} characters)"


class RefusedMember(UserError):
    def __init__(self, archive: str, member: str, why: str) -> None:
        super().__init__(
            f"the code archive {archive} holds {_shown(member)}, {why}; rebuild the archive without it"
        )


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
    at = f"(at {_shown(member)})"
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
            f"the code archive {archive} unpacks to more than {_size(limits.max_bytes)} "
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
        f"{at[:-1]}: {_size(room.free_bytes)} free, of which {_size(RESERVED_BYTES)} stay free for the "
        f"job's log and failure file); {larger_volume} or a smaller archive"
    )


def write_failure(archive: str, member: str, error: OSError) -> SagetrainError:
    """What writing ``member`` failing with ``error`` means to the user."""
    if error.errno in VOLUME_FULL:
        return UserError(
            f"the code folder's volume filled up while unpacking {_shown(member)} from the code archive "
            f"{archive}; give the job a larger volume (VolumeSizeInGB) or a smaller archive"
        )
    if error.errno in _VOLUME_BROKEN:
        return PlatformError(
            f"cannot write {_shown(member)} of the code archive {archive} to the code folder's volume "
            f"({error.strerror})"
        )
    return RefusedMember(archive, member, f"which cannot be unpacked here ({error.strerror})")


class _Unfit(Exception):
    """A member refused while tarfile reads its header (where the archive's name is not known)."""

    def __init__(self, member: str, why: str) -> None:
        super().__init__(why)
        self.member = member
        self.why = why


class _Unreadable(Exception):
    """The archive is damaged; the text says how."""


class _LinkLoop(Exception):
    """A path follows more links than Linux would."""


def _reading(call: Callable[[], T]) -> T:
    try:
        return call()
    except _READ_ERRORS as error:
        raise _Unreadable(str(error) or type(error).__name__) from None


class _BoundedHeader(tarfile.TarInfo):
    """A member's header that refuses what tarfile would read whole into memory, and does not take a
    damaged header for the end of the archive."""

    @classmethod
    def fromtarfile(cls, archive: tarfile.TarFile) -> Self:
        try:
            return super().fromtarfile(archive)
        except tarfile.HeaderError as error:
            # Past the first header tarfile would end the archive at a bad one without a word; at the
            # first it raises ReadError, which tarfile.open needs to try the next compression.
            if archive.offset == 0 or isinstance(error, EOFHeaderError):
                raise
            if isinstance(error, EmptyHeaderError | TruncatedHeaderError):
                raise _Unreadable(f"it is cut off at byte {archive.offset:,}") from None
            raise _Unreadable(f"{error} at byte {archive.offset:,}") from None

    # tarfile's own comment names _proc_member as the method a subclass overrides.
    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise _Unfit(self.name, "a sparse file")
        if self.type in _EXTENDED_HEADERS and self.size > MAX_EXTENDED_HEADER:
            raise _Unfit(self.name, f"an extended header (a long name or pax records) of {_size(self.size)}")
        member: tarfile.TarInfo = super()._proc_member(archive)  # type: ignore[misc]
        return member

    def _proc_gnusparse_10(self, next: tarfile.TarInfo, pax_headers: dict[str, str], archive: object) -> None:
        # GNU's sparse format 1.0 keeps its map in the member's data: tarfile would read all of it.
        raise _Unfit(next.name, "a sparse file")


def _kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "folder"
    if member.issym():
        return "link"
    return "hard link" if member.islnk() else "file"


def _checked_name(archive: str, member: tarfile.TarInfo, name_max: int) -> PurePosixPath:
    name = PurePosixPath(member.name)
    if name.is_absolute():
        raise RefusedMember(archive, member.name, "an absolute path")
    if ".." in name.parts:
        raise RefusedMember(archive, member.name, "a path with '..' in it")
    if member.mode & (stat.S_ISUID | stat.S_ISGID):
        raise RefusedMember(archive, member.name, "a set-user-ID or set-group-ID file")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise RefusedMember(archive, member.name, "a device file or FIFO")
    if member.sparse is not None:
        raise RefusedMember(archive, member.name, "a sparse file")
    longest = max((len(os.fsencode(part)) for part in name.parts), default=0)
    if longest > name_max:
        raise RefusedMember(
            archive, member.name,
            f"a name of {longest} bytes, longer than the {name_max} a file name may have on this volume",
        )  # fmt: skip
    return name


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None


class _Extraction:
    def __init__(self, archive: str, tar: tarfile.TarFile, folder: Path, limits: ArchiveLimits, room: Room):
        self.archive = archive
        self.tar = tar
        self.root = folder.resolve()
        self.limits = limits
        self.room = room
        self.tally = Tally()
        self.name_max = os.pathconf(self.root, "PC_NAME_MAX")

    def refuse(self, member: str, why: str) -> RefusedMember:
        return RefusedMember(self.archive, member, why)

    def run(self) -> Tally:
        while (member := _reading(self.tar.next)) is not None:
            self.guarded(member.name, functools.partial(self.extract, member))
        self.check_links()
        self.check_end()
        return self.tally

    def guarded(self, member: str, step: Callable[[], None]) -> None:
        """``step`` on ``member``, what the file system refuses said in one sentence."""
        try:
            step()
        except _LinkLoop:
            raise self.refuse(member, "a link in a loop, or a path through one") from None
        except OSError as error:
            raise write_failure(self.archive, member, error) from None

    def resolve(self, parts: Sequence[str]) -> tuple[str, ...] | None:
        """``parts`` below the folder with every link on disk followed, as if the folder were ``/``: the
        real path below it, or None when it climbs out (a '..' at the top, an absolute link)."""
        resolved: list[str] = []
        pending = list(parts)
        hops = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not resolved:
                    return None
                resolved.pop()
                continue
            here = self.root.joinpath(*resolved, part)
            if not here.is_symlink():
                resolved.append(part)
                continue
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise _LinkLoop
            target = here.readlink()
            if target.is_absolute():
                return None
            pending[:0] = target.parts
        return tuple(resolved)

    def weigh(self, member: tarfile.TarInfo) -> None:
        """Count ``member`` in before its data is read (tarfile reads exactly ``size`` bytes of it)."""
        self.tally = self.tally.plus(member.size if member.isreg() else 0, self.room.block_size)
        over = excess(self.tally, self.limits, self.room)
        if over is not None:
            raise too_large(self.archive, over, self.limits, self.room, member.name)

    def extract(self, member: tarfile.TarInfo) -> None:
        name = _checked_name(self.archive, member, self.name_max)
        self.weigh(member)
        if name == PurePosixPath("."):
            return
        path = self.destination(member, name)
        mode = member.mode & 0o777
        if member.isdir():
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(mode | 0o700)
        elif member.issym():
            self.link(member, name, path)
        elif member.islnk():
            self.hard_link(member, path)
        else:
            self.write(member, path, mode)

    def destination(self, member: tarfile.TarInfo, name: PurePosixPath) -> Path:
        """Where ``member`` goes: below its folder as the links already unpacked lead there."""
        parent = self.resolve(name.parts[:-1])
        if parent is None:
            raise self.refuse(member.name, "a path through a link that leads outside")
        for depth in range(1, len(parent) + 1):
            status = _lstat(self.root.joinpath(*parent[:depth]))
            if status is None:
                break
            if not stat.S_ISDIR(status.st_mode):
                through = "/".join(parent[:depth])
                raise self.refuse(member.name, f"a path through {through!r}, which the archive makes a file")
        path = self.root.joinpath(*parent, name.name)
        status = _lstat(path)
        if status is not None:
            self.check_over(member, status.st_mode)
        return path

    def check_over(self, member: tarfile.TarInfo, mode: int) -> None:
        """A member over one of the same name: a file may replace a file (an archive appended to), a
        link a file or a link; nothing replaces a folder, a link is replaced only by a link."""
        if stat.S_ISLNK(mode) and not member.issym():
            raise self.refuse(member.name, f"a {_kind(member)} written over a link")
        if stat.S_ISDIR(mode) and not member.isdir():
            raise self.refuse(member.name, f"a {_kind(member)} over a folder of the same name")
        if not stat.S_ISDIR(mode) and member.isdir():
            raise self.refuse(member.name, "a folder over a file of the same name")

    def outside(self, member: tarfile.TarInfo) -> RefusedMember:
        return self.refuse(member.name, f"a link to {_shown(member.linkname)} outside the folder")

    def link(self, member: tarfile.TarInfo, name: PurePosixPath, path: Path) -> None:
        if PurePosixPath(member.linkname).is_absolute():
            raise self.outside(member)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.symlink_to(member.linkname)
        if self.resolve(name.parts) is None:
            raise self.outside(member)

    def hard_link(self, member: tarfile.TarInfo, path: Path) -> None:
        target = PurePosixPath(member.linkname)
        found = None if target.is_absolute() or ".." in target.parts else self.resolve(target.parts)
        if found is None:
            raise self.outside(member)
        source = self.root.joinpath(*found)
        status = _lstat(source)
        if status is None or not stat.S_ISREG(status.st_mode):
            raise self.refuse(member.name, f"a link to {_shown(member.linkname)}, not a file in it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.hardlink_to(source)

    def write(self, member: tarfile.TarInfo, path: Path, mode: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        source = _reading(functools.partial(self.tar.extractfile, member))
        if source is None:
            raise self.refuse(member.name, "a member that cannot be read")
        # O_NOFOLLOW: a link put in place between the check and the open is not followed either.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with source, os.fdopen(descriptor, "wb") as sink:
            while chunk := _reading(functools.partial(source.read, CHUNK)):
                sink.write(chunk)
        path.chmod(mode)

    def check_links(self) -> None:
        """After extraction: every link still resolves inside (a later link may have redirected it)."""
        for top, folders, files in os.walk(self.root):
            for entry in (*folders, *files):
                relative = Path(top, entry).relative_to(self.root)
                self.guarded(relative.as_posix(), functools.partial(self.check_link, relative))

    def check_link(self, relative: Path) -> None:
        if self.root.joinpath(relative).is_symlink() and self.resolve(relative.parts) is None:
            raise self.refuse(relative.as_posix(), "a link that, with the links after it, leads outside")

    def check_end(self) -> None:
        """Only zeros follow the end-of-archive block (else members may be missing: a damaged archive, or
        two joined); reading to the end also has the decompressor check the archive's checksum."""
        read = functools.partial(self.tar.fileobj.read, CHUNK)
        left = MAX_TRAILER
        while left > 0 and (chunk := _reading(read)):
            if chunk.count(0) != len(chunk):
                raise UserError(
                    f"the code archive {self.archive} holds data after its end-of-archive block (a "
                    "damaged archive, or two joined); rebuild it as one tar file"
                )
            left -= len(chunk)


def _open(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive, mode="r:*", tarinfo=_BoundedHeader)
    except tarfile.ReadError:  # one line per compression tried, each saying it was not that
        raise _Unreadable("neither plain nor compressed with gzip, bzip2 or xz") from None


def extract_archive(
    archive: Path,
    folder: Path,
    shown_as: str,
    limits: ArchiveLimits = DEFAULT_LIMITS,
    room: Room | None = None,
) -> Tally:
    """Unpack ``archive`` (a tar file, compressed or not) into ``folder`` (made if missing), weighing each
    member against ``limits`` and ``room`` (the folder's volume as it is now, when not given);
    ``shown_as`` names the archive in messages (the S3 URI it came from). What was unpacked, counted."""
    folder.mkdir(parents=True, exist_ok=True)
    room = Room.of(folder) if room is None else room
    try:
        with _reading(functools.partial(_open, archive)) as tar:
            return _Extraction(shown_as, tar, folder, limits, room).run()
    except _Unfit as unfit:
        raise RefusedMember(shown_as, unfit.member, unfit.why) from None
    except _Unreadable as error:
        raise UserError(
            f"the code archive {shown_as} cannot be read as a tar file ({error}); rebuild it (tar czf)"
        ) from None
