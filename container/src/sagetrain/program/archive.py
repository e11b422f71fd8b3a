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
and the room on the folder's volume (program/archive_budget.py). The archive is read with tarfile's public
API only, and what tarfile would read whole into memory (an extended header larger than any real one, a
sparse map) is refused before it sees it (program/archive_stream.py). A damaged archive (a bad header,
data missing, a checksum that does not match, data after the end) is refused too.

tarfile's extraction filters (PEP 706) are not used: the image's Python (Debian's 3.11.2) predates them.
What the ``data`` filter refuses is refused here too (absolute names and link targets, names and links
that lead outside, device files and FIFOs), and what it would rewrite (a leading '/', a set-user-ID bit)
is refused.

After a refusal the folder holds part of the archive: the caller unpacks into a folder of its own and
discards it (program/code.py).
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

from sagetrain.errors import PlatformError, SagetrainError, UserError
from sagetrain.program.archive_budget import (
    DEFAULT_LIMITS,
    ArchiveLimits,
    Room,
    Tally,
    excess,
    shown,
    too_large,
)
from sagetrain.program.archive_stream import MemberStream, Unfit, Unreadable, members_of

# As Linux (MAXSYMLINKS): more links than this in one path is taken for a loop.
MAX_LINK_HOPS = 40
# Errors writing a member that come from the volume rather than from the archive.
VOLUME_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_VOLUME_BROKEN = frozenset({errno.EIO, errno.EROFS})


class RefusedMember(UserError):
    def __init__(self, archive: str, member: str, why: str) -> None:
        super().__init__(
            f"the code archive {archive} holds {shown(member)}, {why}; rebuild the archive without it"
        )


def write_failure(archive: str, member: str, error: OSError) -> SagetrainError:
    """What writing ``member`` failing with ``error`` means to the user."""
    if error.errno in VOLUME_FULL:
        return UserError(
            f"the code folder's volume filled up while unpacking {shown(member)} from the code archive "
            f"{archive}; give the job a larger volume (VolumeSizeInGB) or a smaller archive"
        )
    if error.errno in _VOLUME_BROKEN:
        return PlatformError(
            f"cannot write {shown(member)} of the code archive {archive} to the code folder's volume "
            f"({error.strerror})"
        )
    return RefusedMember(archive, member, f"which cannot be unpacked here ({error.strerror})")


class _LinkLoop(Exception):
    """A path follows more links than Linux would."""


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
    if any(key.startswith("GNU.sparse.") for key in member.pax_headers):
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
    def __init__(self, archive: str, stream: MemberStream, folder: Path, limits: ArchiveLimits, room: Room):
        self.archive = archive
        self.stream = stream
        self.root = folder.resolve()
        self.limits = limits
        self.room = room
        self.tally = Tally()
        self.name_max = os.pathconf(self.root, "PC_NAME_MAX")

    def refuse(self, member: str, why: str) -> RefusedMember:
        return RefusedMember(self.archive, member, why)

    def run(self) -> Tally:
        while (member := self.stream.next()) is not None:
            self.guarded(member.name, functools.partial(self.extract, member))
        self.check_links()
        if not self.stream.only_zeros_follow():
            raise UserError(
                f"the code archive {self.archive} holds data after its end-of-archive block (a damaged "
                "archive, or two joined); rebuild it as one tar file"
            )
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
        """Count ``member`` in before its data is read (the stream reads exactly ``size`` bytes of it)."""
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
        return self.refuse(member.name, f"a link to {shown(member.linkname)} outside the folder")

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
            raise self.refuse(member.name, f"a link to {shown(member.linkname)}, not a file in it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.hardlink_to(source)

    def write(self, member: tarfile.TarInfo, path: Path, mode: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a link put in place between the check and the open is not followed either.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(descriptor, "wb") as sink:
            for chunk in self.stream.data():
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
        with members_of(archive) as stream:
            return _Extraction(shown_as, stream, folder, limits, room).run()
    except Unfit as unfit:
        raise RefusedMember(shown_as, unfit.member, unfit.why) from None
    except Unreadable as error:
        raise UserError(
            f"the code archive {shown_as} cannot be read as a tar file ({error}); rebuild it (tar czf)"
        ) from None
