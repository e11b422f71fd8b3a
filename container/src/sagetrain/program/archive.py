"""Unpacking the code archive (``sagemaker_submit_directory``) so that nothing in it lands outside the
code folder or brings what a code folder has no use for.

Refused, with one sentence naming the member: absolute names, ``..`` in a name, a link whose target
(after resolving every link before it, on disk) is outside the folder, a member written through such a
link, device files and FIFOs, and set-user-ID / set-group-ID bits. Checks use the real paths on disk as
extraction goes, so a chain of links that only together leads outside is caught.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
from pathlib import Path, PurePosixPath

from sagetrain.errors import UserError


class RefusedMember(UserError):
    def __init__(self, archive: str, member: str, why: str) -> None:
        super().__init__(
            f"the code archive {archive} holds {member!r}, {why}; rebuild the archive without it"
        )


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _checked_name(archive: str, member: tarfile.TarInfo) -> PurePosixPath:
    name = PurePosixPath(member.name)
    if name.is_absolute():
        raise RefusedMember(archive, member.name, "an absolute path")
    if ".." in name.parts:
        raise RefusedMember(archive, member.name, "a path with '..' in it")
    if member.mode & (stat.S_ISUID | stat.S_ISGID):
        raise RefusedMember(archive, member.name, "a set-user-ID or set-group-ID file")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise RefusedMember(archive, member.name, "a device file or FIFO")
    return name


class _Extraction:
    def __init__(self, archive: str, tar: tarfile.TarFile, folder: Path) -> None:
        self.archive = archive
        self.tar = tar
        self.folder = folder.resolve()

    def destination(self, member: tarfile.TarInfo, name: PurePosixPath) -> Path:
        """Where ``member`` goes; refused when its folder, as it is on disk now, is outside."""
        path = self.folder.joinpath(*name.parts)
        if not _inside(path.parent.resolve(), self.folder):
            raise RefusedMember(self.archive, member.name, "a path through a link that leads outside")
        if path.is_symlink() and not member.issym():
            raise RefusedMember(self.archive, member.name, "a file written over a link")
        return path

    def extract(self, member: tarfile.TarInfo) -> None:
        name = _checked_name(self.archive, member)
        if name == PurePosixPath("."):
            return
        path = self.destination(member, name)
        mode = member.mode & 0o777
        if member.isdir():
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(mode | 0o700)
        elif member.issym():
            self.link(member, path)
        elif member.islnk():
            self.hard_link(member, path)
        else:
            self.write(member, path, mode)

    def outside(self, member: tarfile.TarInfo) -> RefusedMember:
        return RefusedMember(self.archive, member.name, f"a link to {member.linkname!r} outside the folder")

    def link(self, member: tarfile.TarInfo, path: Path) -> None:
        target = (path.parent / member.linkname).resolve()
        if PurePosixPath(member.linkname).is_absolute() or not _inside(target, self.folder):
            raise RefusedMember(
                self.archive, member.name, f"a link to {member.linkname!r} outside the folder"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.symlink_to(member.linkname)

    def hard_link(self, member: tarfile.TarInfo, path: Path) -> None:
        name = PurePosixPath(member.linkname)
        source = self.folder.joinpath(*name.parts)
        if name.is_absolute() or ".." in name.parts or not _inside(source.resolve(), self.folder):
            raise RefusedMember(
                self.archive, member.name, f"a link to {member.linkname!r} outside the folder"
            )
        if not source.is_file() or source.is_symlink():
            raise RefusedMember(self.archive, member.name, f"a link to {member.linkname!r}, not a file in it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        os.link(source, path)

    def write(self, member: tarfile.TarInfo, path: Path, mode: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        source = self.tar.extractfile(member)
        if source is None:
            raise RefusedMember(self.archive, member.name, "a member that cannot be read")
        # O_NOFOLLOW: a link put in place between the check and the open is not followed either.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with source, os.fdopen(descriptor, "wb") as sink:
            shutil.copyfileobj(source, sink)
        path.chmod(mode)

    def check_links(self) -> None:
        """After extraction: every link still resolves inside (a later link may have redirected it)."""
        for path in self.folder.rglob("*"):
            if path.is_symlink() and not _inside(path.resolve(), self.folder):
                member = path.relative_to(self.folder).as_posix()
                raise RefusedMember(
                    self.archive, member, "a link that, with the links after it, leads outside"
                )


def extract_archive(archive: Path, folder: Path, shown_as: str) -> None:
    """Unpack ``archive`` (a tar file, compressed or not) into ``folder``; ``shown_as`` names it in
    messages (the S3 URI it came from)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            extraction = _Extraction(shown_as, tar, folder)
            for member in tar:
                extraction.extract(member)
            extraction.check_links()
    except tarfile.TarError as error:
        raise UserError(f"the code archive {shown_as} cannot be read as a tar file ({error})") from None
