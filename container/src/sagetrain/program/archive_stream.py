"""A code archive read member by member with tarfile's public API, under bounds: tarfile parses no block
that was not weighed first.

Left to itself, tarfile reads what comes before a member's own header whole into memory (a GNU long name,
pax records), reads a sparse file's map from the member's data, and ends an archive without a word at a
damaged header past the first. So the blocks of each member's header are read here, one at a time, and
looked at with ``TarInfo.frombuf`` before tarfile sees them: an extended header larger than any real one,
a sparse file, more extended headers in a row than any real archive has, and a header that is damaged or
cut off are refused there. Only then does tarfile parse the member, from those blocks alone
(``TarFile.next`` over them, with the pax global records met so far). A member's data is read here too,
the ``size`` tarfile gives, so that the caller weighs that size before a byte of it is read.

The compression is told from the file's first bytes, as gzip, bzip2 and xz write them; reading the
archive to its end has the decompressor check the checksum.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from sagetrain.program.archive_budget import MiB, size_text

BLOCK = 512
# tarfile reads a GNU long name or pax records whole into memory; real ones hold a few hundred bytes. The
# pax global records (they apply to every member after them) may add up to as much.
MAX_EXTENDED_HEADER = 64 << 10
# Real archives put at most a few extended headers before a member (pax records, a long name, a long
# link target); tarfile would read a chain of them recursively.
MAX_EXTENDED_HEADERS = 16
# Only zeros may follow the end-of-archive block (padding to a record: 10 KiB as tar and tarfile write
# it); this much is read to check it, and for a compressed archive to reach its checksum.
MAX_TRAILER = 16 * MiB
CHUNK = 1 * MiB
NOT_A_TAR_FILE = "neither plain nor compressed with gzip, bzip2 or xz"
# The type flags of the blocks that describe the header after them instead of a member of their own: GNU
# tar's long name and long link target; POSIX pax records for the next member ('x'; 'X' as Solaris wrote
# them) and for every member after them ('g').
_GNU_LONG = (b"L", b"K")
_PAX_GLOBAL = b"g"
_PAX = (b"x", b"X", _PAX_GLOBAL)
_EXTENDED = (*_GNU_LONG, *_PAX)
# The pax record of GNU's sparse files whose map is in the member's data (version 1.0; versions 0.x keep it
# in the records themselves, which tarfile parses here, bounded, for the caller to refuse).
_SPARSE_MAP_IN_DATA = b"GNU.sparse.major="
# What reading a damaged compressed stream raises (gzip's and bz2's errors are OSError).
_READ_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError)
_DECOMPRESSORS: tuple[tuple[bytes, Callable[[Path], io.BufferedIOBase]], ...] = (
    (b"\x1f\x8b", gzip.GzipFile),
    (b"BZh", bz2.BZ2File),
    (b"\xfd7zXZ\x00", lzma.LZMAFile),
)


class Unreadable(Exception):
    """The archive is damaged; the text says how."""


class Unfit(Exception):
    """A member refused from its header, before tarfile reads it."""

    def __init__(self, member: str, why: str) -> None:
        super().__init__(why)
        self.member = member
        self.why = why


def holds_record(records: bytes, key: bytes) -> bool:
    """Whether pax records (``"<length> <key>=<value>\\n"`` each, as POSIX writes them) hold one of ``key``
    (given with its '='). Damaged records are left for tarfile to refuse."""
    at = 0
    while at < len(records) and records[at]:
        length, space, _ = records[at : at + 21].partition(b" ")
        if not space or not length.isdigit() or int(length) < len(length) + 2:
            return False
        if records.startswith(key, at + len(length) + 1):
            return True
        at += int(length)
    return False


def _padded(size: int) -> int:
    return -size % BLOCK


def _damaged(start: int, how: str) -> Unreadable:
    """The header at ``start`` is damaged: at the first, as tarfile.open says of a file it cannot open."""
    return Unreadable(NOT_A_TAR_FILE if start == 0 else f"{how} at byte {start:,}")


class MemberStream:
    """The members of one tar stream (decompressed), one at a time: ``next`` for a member's header, then
    ``data`` for what a file holds, if the caller wants it."""

    def __init__(self, source: io.BufferedIOBase) -> None:
        self.source = source
        self.position = 0  # bytes read from the stream
        self.left = 0  # bytes after the last member's header that belong to it: its data, padded to a block
        self.data_left = 0  # of which its data not read yet
        self.global_records: dict[str, str] = {}
        self.global_size = 0

    def read(self, count: int) -> bytes:
        try:
            chunk = self.source.read(count)
        except _READ_ERRORS as error:
            # Nothing decompressed yet: as tarfile.open says of what it cannot decompress, but a stream that
            # ends early, which it lets through.
            if self.position == 0 and not isinstance(error, EOFError):
                raise Unreadable(NOT_A_TAR_FILE) from None
            raise Unreadable(str(error) or type(error).__name__) from None
        self.position += len(chunk)
        return chunk

    def skip(self, count: int) -> None:
        while count > 0:
            chunk = self.read(min(count, CHUNK))
            if not chunk:
                raise Unreadable("unexpected end of data")
            count -= len(chunk)

    def next(self) -> tarfile.TarInfo | None:
        """The next member's header; None at the end-of-archive block."""
        self.skip(self.left)
        start = self.position
        blocks = self.read_header(start)
        if blocks is None:
            return None
        member = self.parsed(blocks, start)
        # As tarfile: data follows a file's header only (whatever size a link or folder claims).
        self.data_left = member.size if member.isreg() else 0
        self.left = self.data_left + _padded(self.data_left)
        return member

    def data(self) -> Iterator[bytes]:
        """What the last member holds, a chunk at a time."""
        while self.data_left > 0:
            chunk = self.read(min(self.data_left, CHUNK))
            if not chunk:
                raise Unreadable("unexpected end of data")
            self.data_left -= len(chunk)
            self.left -= len(chunk)
            yield chunk

    def only_zeros_follow(self) -> bool:
        """Whether only zeros follow the end-of-archive block (else members may be missing: a damaged
        archive, or two joined); reading to the end has the decompressor check the archive's checksum."""
        left = MAX_TRAILER
        while left > 0 and (chunk := self.read(min(left, CHUNK))):
            if chunk.count(0) != len(chunk):
                return False
            left -= len(chunk)
        return True

    def read_header(self, start: int) -> bytes | None:
        """The blocks of the header of the member at ``start``: the extended headers before it, each
        weighed before its records are read, and its own; None at the end-of-archive block."""
        blocks: list[bytes] = []
        map_in_data = False
        for _ in range(MAX_EXTENDED_HEADERS + 1):
            header, block = self.read_block(start)
            if header is None:
                if blocks:  # extended headers that describe no member
                    raise _damaged(start, "end of file header")
                return None
            blocks.append(block)
            if header.type not in _EXTENDED:
                # tarfile would read the map of a sparse file, from its data or from blocks after its header.
                if map_in_data or header.type == tarfile.GNUTYPE_SPARSE:
                    raise Unfit(header.name, "a sparse file")
                return b"".join(blocks)
            records = self.read_records(header, start)
            map_in_data = map_in_data or (header.type in _PAX and holds_record(records, _SPARSE_MAP_IN_DATA))
            blocks.append(records)
        raise Unreadable(f"more than {MAX_EXTENDED_HEADERS} extended headers in a row at byte {start:,}")

    def read_block(self, start: int) -> tuple[tarfile.TarInfo | None, bytes]:
        """The next block as a header, checked as tarfile checks one; None for a block of zeros."""
        block = self.read(BLOCK)
        if len(block) < BLOCK:
            raise _damaged(start, "it is cut off")
        if block.count(0) == BLOCK:
            return None, block
        try:
            return tarfile.TarInfo.frombuf(block, tarfile.ENCODING, "surrogateescape"), block
        except (tarfile.TarError, ValueError) as error:
            raise _damaged(start, str(error)) from None

    def read_records(self, header: tarfile.TarInfo, start: int) -> bytes:
        """The data of an extended header (a long name, pax records), padded to a block, once weighed."""
        if header.size < 0:  # a base-256 number: tarfile would read to the end
            raise Unreadable(f"a negative size at byte {start:,}")
        if header.type == _PAX_GLOBAL:
            self.global_size += header.size
        size = max(header.size, self.global_size)
        if size > MAX_EXTENDED_HEADER:
            raise Unfit(header.name, f"an extended header (a long name or pax records) of {size_text(size)}")
        wanted = header.size + _padded(header.size)
        records = self.read(wanted)
        if len(records) < wanted:
            raise _damaged(start, "it is cut off")
        return records

    def parsed(self, blocks: bytes, start: int) -> tarfile.TarInfo:
        """The member whose header ``blocks`` hold, as tarfile reads it. TarFile takes the global records
        met so far as its ``pax_headers`` and, reading, applies them as if it had met them itself."""
        try:
            with tarfile.TarFile(fileobj=io.BytesIO(blocks), pax_headers=dict(self.global_records)) as tar:
                member = tar.next()
                global_records = tar.pax_headers
        except (tarfile.TarError, ValueError) as error:
            raise _damaged(start, str(error)) from None
        if member is None:
            raise _damaged(start, "end of file header")
        if member.size < 0:  # it would lower the tally the caller weighs members against
            raise Unreadable(f"a negative size at byte {start:,}")
        self.global_records = dict(global_records)
        return member


@contextlib.contextmanager
def members_of(path: Path) -> Iterator[MemberStream]:
    """The members of the tar file at ``path``, plain or compressed with gzip, bzip2 or xz."""
    try:
        with path.open("rb") as raw:
            magic = raw.read(6)
        opened = next((open_ for prefix, open_ in _DECOMPRESSORS if magic.startswith(prefix)), None)
        source = path.open("rb") if opened is None else opened(path)
    except _READ_ERRORS as error:
        raise Unreadable(str(error) or type(error).__name__) from None
    with source:
        yield MemberStream(source)
