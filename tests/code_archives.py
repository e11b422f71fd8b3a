"""Code archives a hostile or careless user could hand the image, built with tarfile, and a small volume
to unpack them on: for the unit and host tests of the code archive's extraction (program/archive.py)."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

GiB = 1 << 30
MiB = 1 << 20


def member(name, kind=tarfile.REGTYPE, data=b"", linkname="", mode=0o644):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.size = kind, linkname, mode, len(data)
    return info, io.BytesIO(data) if kind in (tarfile.REGTYPE, tarfile.GNUTYPE_LONGNAME) else None


class _Zeros(io.RawIOBase):
    def __init__(self, size):
        self.left = size

    def readable(self):
        return True

    def readinto(self, buffer):
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def zeros(name, size):
    """A member of ``size`` zero bytes, streamed (never held in memory)."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info, io.BufferedReader(_Zeros(size), MiB)


def write_archive(path, *members, mode="w:gz"):
    options = {"compresslevel": 9} if mode.endswith("gz") else {}
    with tarfile.open(path, mode, **options) as tar:
        for info, data in members:
            tar.addfile(info, data)
    return path


def claiming_archive(path, name, claimed, data=b""):
    """A member whose header claims ``claimed`` bytes, followed by ``data`` alone: a cut-off archive."""
    info = tarfile.TarInfo(name)
    info.size = claimed
    with gzip.open(path, "wb") as out:
        out.write(info.tobuf(tarfile.PAX_FORMAT) + data)
    return path


def _with_checksum(header: bytearray) -> bytes:
    header[148:156] = b" " * 8
    header[148:155] = b"%06o\0" % sum(header)
    return bytes(header)


def gnu_sparse_archive(path, name, real_size):
    """An old-GNU sparse member (type 'S') that claims ``real_size`` bytes, all of them a hole: a header
    and the end-of-archive blocks, about 200 bytes compressed."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.GNUTYPE_SPARSE
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    header[483:495] = tarfile.itn(real_size, 12, tarfile.GNU_FORMAT)  # realsize
    with tarfile.open(path, "w:gz", compresslevel=9) as tar:
        tar.fileobj.write(_with_checksum(header))
        tar.offset += len(header)
    return path


def pax_sparse_archive(path, name, real_size, sparse_map: bytes):
    """A GNU sparse member in pax format 1.0, whose map (in its data) starts with ``sparse_map``."""
    info = tarfile.TarInfo(f"GNUSparseFile.0/{name}")
    info.pax_headers = {
        "GNU.sparse.major": "1", "GNU.sparse.minor": "0",
        "GNU.sparse.name": name, "GNU.sparse.realsize": str(real_size),
    }  # fmt: skip
    info.size = 512
    return write_archive(path, (info, io.BytesIO(sparse_map.ljust(512, b"\0"))), mode="w:gz")


def header_block(name, kind=tarfile.REGTYPE, size=0):
    """One header block as tar writes it, claiming ``size`` bytes whatever follows (GNU's format: a
    negative size is written in base 256)."""
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(tarfile.GNU_FORMAT)


def padded(data):
    """``data`` padded with zeros to a whole block, as a member's data or an extended header's."""
    return data + bytes(-len(data) % tarfile.BLOCKSIZE)


def pax_records(**records):
    """pax records as POSIX writes them: ``"<length> <key>=<value>\\n"``, the length counting itself."""
    written = b""
    for key, value in records.items():
        body = f" {key}={value}\n".encode()
        length = len(body) + 1
        while len(str(length)) + len(body) != length:
            length += 1
        written += str(length).encode() + body
    return written


def block_archive(path, *blocks, compress=False):
    """An archive of ``blocks`` as given, then the end-of-archive blocks; gzip-compressed if asked."""
    data = b"".join(blocks) + bytes(2 * tarfile.BLOCKSIZE)
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


@contextlib.contextmanager
def small_volume(folder: Path, size: str):
    """A tmpfs of ``size`` mounted on ``folder`` (made here) while the block runs; the test is skipped
    where it cannot be mounted (not root, no mount permission)."""
    folder.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small volume needs root")
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)
