"""Unpacking the code archive: what a hostile archive may not do (program/archive.py, archive_stream.py,
archive_budget.py), and how the code folder holds all of an archive or nothing of it (program/code.py), on
real files."""

import ast
import errno
import json
import shutil
import stat
import tarfile
import time
from pathlib import Path

import pytest
from code_archives import (
    GiB,
    MiB,
    block_archive,
    claiming_archive,
    gnu_sparse_archive,
    header_block,
    member,
    padded,
    pax_records,
    pax_sparse_archive,
    small_volume,
    write_archive,
    zeros,
)
from sagetrain.config.hyperparameters import JobSettings, LaunchSettings
from sagetrain.config.paths import Paths
from sagetrain.errors import PlatformError, UserError
from sagetrain.program.archive import RefusedMember, extract_archive, write_failure
from sagetrain.program.archive_budget import ArchiveLimits, Excess, Room, Tally, excess
from sagetrain.program.archive_stream import holds_record
from sagetrain.program.code import (
    CodeState,
    Unpacked,
    code_state,
    locate_code,
    read_record,
    record_path,
    unpack_code,
    write_record,
)


def archive(tmp_path, *members):
    return write_archive(tmp_path / "sourcedir.tar.gz", *members)


@pytest.fixture
def code(tmp_path):
    return tmp_path / "ml" / "code"


def test_a_plain_archive_with_links_inside_unpacks(tmp_path, code):
    path = archive(
        tmp_path,
        member("./train.py", data=b"print(1)\n", mode=0o755),
        member("lib", tarfile.DIRTYPE, mode=0o755),
        member("lib/util.py", data=b"x = 1\n"),
        member("lib/alias.py", tarfile.SYMTYPE, linkname="util.py"),
        member("copy.py", tarfile.LNKTYPE, linkname="lib/util.py"),
    )
    extract_archive(path, code, "s3://bucket/sourcedir.tar.gz")
    assert (code / "train.py").read_text() == "print(1)\n"
    assert stat.S_IMODE((code / "train.py").stat().st_mode) == 0o755
    assert (code / "lib" / "alias.py").read_text() == "x = 1\n"
    assert (code / "copy.py").read_text() == "x = 1\n"


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([member("/etc/evil", data=b"x")], "'/etc/evil', an absolute path"),
        ([member("../slip", data=b"x")], "'../slip', a path with '..' in it"),
        ([member("out", tarfile.SYMTYPE, linkname="/etc")], "'out', a link to '/etc' outside the folder"),
        ([member("up", tarfile.SYMTYPE, linkname="../..")], "'up', a link to '../..' outside the folder"),
        # Each link alone stays inside; together they lead out: here is the folder, here/.. its parent.
        ([member("here", tarfile.SYMTYPE, linkname="."), member("chain", tarfile.SYMTYPE, linkname="here/.."),
          member("chain/slip_chain", data=b"x")], "'chain', a link to 'here/..' outside the folder"),
        ([member("dev", tarfile.CHRTYPE)], "'dev', a device file or FIFO"),
        ([member("pipe", tarfile.FIFOTYPE)], "'pipe', a device file or FIFO"),
        ([member("run", data=b"x", mode=0o4755)], "'run', a set-user-ID or set-group-ID file"),
        ([member("hard", tarfile.LNKTYPE, linkname="../../secret")],
         "'hard', a link to '../../secret' outside"),
    ],
)  # fmt: skip
def test_a_hostile_member_is_refused_naming_it_and_nothing_lands_outside(tmp_path, code, members, why):
    path = archive(tmp_path, *members)
    with pytest.raises(UserError) as error:
        extract_archive(path, code, "s3://bucket/sourcedir.tar.gz")
    assert error.value.cause.startswith(f"the code archive s3://bucket/sourcedir.tar.gz holds {why}")
    assert error.value.cause.endswith("; rebuild the archive without it")
    expected = (path, tmp_path / "ml", code)
    assert [p for p in tmp_path.rglob("*") if p not in expected and code not in p.parents] == []


def test_a_link_redirected_by_a_later_link_is_refused_after_unpacking(tmp_path, code):
    # "later" points into "dir", which does not exist yet; "dir" then becomes a link to "..": only after
    # both are in place does "later" lead out.
    path = archive(
        tmp_path,
        member("later", tarfile.SYMTYPE, linkname="dir/.."),
        member("dir", tarfile.SYMTYPE, linkname="."),
    )
    with pytest.raises(UserError, match="'later', a link that, with the links after it, leads outside"):
        extract_archive(path, code, "code.tar.gz")


def test_what_is_not_a_tar_file_is_named(tmp_path, code):
    bad = tmp_path / "sourcedir.tar.gz"
    bad.write_bytes(b"not a tar")
    with pytest.raises(UserError, match=r"the code archive code\.tar\.gz cannot be read as a tar file"):
        extract_archive(bad, code, "code.tar.gz")


# --- what an archive may unpack to: the documented limits, then the volume's room -----------------------

LIMITS = ArchiveLimits(max_bytes=100, max_members=3)
# 16 MiB and 1,000 files stay free for the job's log and failure file.
ROOM = Room(free_bytes=16 * MiB + 10 * 4096, free_files=1_002, block_size=4096)


@pytest.mark.parametrize(
    ("tally", "over"),
    [
        (Tally(members=2, size=100, disk=8192), None),
        (Tally(members=4, size=101, disk=1 << 30), Excess.MEMBERS),  # the documented limits come first
        (Tally(members=3, size=101, disk=1 << 30), Excess.SIZE),
        (Tally(members=3, size=100, disk=1 << 30), Excess.VOLUME_FILES),
        (Tally(members=2, size=100, disk=10 * 4096 + 1), Excess.VOLUME_BYTES),
    ],
)
def test_a_tally_is_weighed_against_the_limits_first_then_the_volume(tally, over):
    assert excess(tally, LIMITS, ROOM) is over
    documented = over if over in (Excess.MEMBERS, Excess.SIZE) else None
    assert excess(tally, LIMITS, Room(1 << 40, None, 4096)) is documented


def test_a_member_takes_its_data_in_whole_blocks_and_a_block_for_its_entry():
    tally = Tally().plus(0, 4096).plus(1, 4096).plus(8192, 4096)
    assert tally == Tally(members=3, size=8193, disk=(1 + 2 + 3) * 4096)


def test_the_limits_are_hyperparameters_with_documented_defaults(tmp_path):
    from sagetrain.config.hyperparameters import parse_settings

    assert ArchiveLimits.of(LaunchSettings()) == ArchiveLimits(4 << 30, 200_000)
    settings = parse_settings(
        {"sagetrain_code_archive_max_bytes": "8589934592", "sagetrain_code_archive_max_members": 5.0},
        tmp_path / "hyperparameters.json",
    )
    assert ArchiveLimits.of(settings.launch) == ArchiveLimits(8 << 30, 5)
    with pytest.raises(UserError, match="field sagetrain_code_archive_max_bytes must be an integer >= 1"):
        parse_settings({"sagetrain_code_archive_max_bytes": 0}, tmp_path / "hyperparameters.json")


def test_a_failed_write_is_the_volume_or_the_member():
    full = write_failure("s3://b/c.tar.gz", "zeros", OSError(errno.ENOSPC, "No space left on device"))
    assert type(full) is UserError
    assert full.cause == (
        "the code folder's volume filled up while unpacking 'zeros' from the code archive s3://b/c.tar.gz; "
        "give the job a larger volume (VolumeSizeInGB) or a smaller archive"
    )
    assert isinstance(write_failure("a", "m", OSError(errno.EIO, "Input/output error")), PlatformError)
    long = write_failure("a", "m", OSError(errno.ENAMETOOLONG, "File name too long"))
    assert isinstance(long, RefusedMember)
    assert long.cause == (
        "the code archive a holds 'm', which cannot be unpacked here (File name too long); rebuild the "
        "archive without it"
    )


def test_a_gzip_bomb_is_refused_at_its_header_before_a_byte_is_written(tmp_path, code):
    path = write_archive(tmp_path / "bomb.tar.gz", zeros("zeros", 64 * MiB))
    assert path.stat().st_size < 100_000
    started = time.monotonic()
    with pytest.raises(UserError) as error:
        extract_archive(path, code, "bomb.tar.gz", ArchiveLimits(16 * MiB, 100))
    assert time.monotonic() - started < 1  # nothing of the 64 MiB was decompressed
    assert error.value.cause == (
        "the code archive bomb.tar.gz unpacks to more than 16 MiB (16,777,216 bytes), the limit the "
        "hyperparameter sagetrain_code_archive_max_bytes sets (at 'zeros'); leave data out of it (a channel "
        "is the place for data) or raise that hyperparameter"
    )
    assert list(code.iterdir()) == []


def test_an_archive_larger_than_the_volume_has_free_is_refused_before_it_fills_it(tmp_path, code):
    path = write_archive(tmp_path / "bomb.tar.gz", member("a.py", data=b"x"), zeros("zeros", 64 * MiB))
    with pytest.raises(UserError) as error:
        extract_archive(path, code, "bomb.tar.gz", room=Room(24 * MiB, None, 4096))
    assert error.value.cause == (
        "the code archive bomb.tar.gz unpacks to more than the code folder's volume has room for (at "
        "'zeros': 24 MiB free, of which 16 MiB stay free for the job's log and failure file); give the job a "
        "larger volume (VolumeSizeInGB) or a smaller archive"
    )
    assert [p.name for p in code.iterdir()] == ["a.py"]  # the caller discards the folder


def test_on_a_small_volume_the_bomb_leaves_it_empty(tmp_path):
    path = write_archive(tmp_path / "bomb.tar.gz", zeros("zeros", 64 * MiB))
    with small_volume(tmp_path / "volume", "32m") as volume:
        with pytest.raises(UserError, match=r"has room for \(at 'zeros': 32 MiB free, of which 16 MiB"):
            extract_archive(path, volume / "code", "bomb.tar.gz")
        assert list((volume / "code").iterdir()) == []
        assert shutil.disk_usage(volume).used < MiB


def test_a_volume_that_fills_up_anyway_is_said_in_one_sentence(tmp_path):
    # The room given is larger than the volume's, as when another process fills it meanwhile.
    path = write_archive(tmp_path / "big.tar.gz", zeros("zeros", 16 * MiB))
    with small_volume(tmp_path / "volume", "4m") as volume, pytest.raises(UserError) as error:
        extract_archive(path, volume / "code", "big.tar.gz", room=Room(1 << 40, None, 4096))
    assert error.value.cause.startswith("the code folder's volume filled up while unpacking 'zeros' from ")


def test_a_tiny_sparse_archive_claiming_8_gib_is_refused_before_its_map_is_read(tmp_path, code):
    for path in (
        gnu_sparse_archive(tmp_path / "gnu.tar.gz", "big", 8 * GiB),
        # A map of a trillion regions: tarfile would read it all into a list.
        pax_sparse_archive(tmp_path / "pax.tar.gz", "big", 8 * GiB, b"1000000000000\n"),
    ):
        assert path.stat().st_size < 300
        with pytest.raises(UserError, match=r"holds '(GNUSparseFile\.0/)?big', a sparse file; rebuild"):
            extract_archive(path, code, "sparse.tar.gz")
        assert list(code.iterdir()) == []


def test_a_header_claiming_more_than_the_limit_is_refused_before_its_data_is_read(tmp_path, code):
    path = claiming_archive(tmp_path / "claims.tar.gz", "claims", 8 * GiB, b"x" * 10)
    with pytest.raises(UserError, match=r"unpacks to more than 4 GiB \(4,294,967,296 bytes\), the limit"):
        extract_archive(path, code, "claims.tar.gz")
    assert list(code.iterdir()) == []


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([member("a", tarfile.SYMTYPE, linkname="b"), member("b", tarfile.SYMTYPE, linkname="a")],
         "'b', a link in a loop, or a path through one"),
        ([member("a", tarfile.SYMTYPE, linkname="a/x"), member("a/y/z.py", data=b"x")],
         "'a', a link in a loop, or a path through one"),
        # Each link resolves inside when it lands; "b" then turns "a" into a loop.
        ([member("a", tarfile.SYMTYPE, linkname="b/c"), member("b", tarfile.SYMTYPE, linkname="a")],
         "'b', a link in a loop, or a path through one"),
        ([member("lib/" + "n" * 300 + ".py", data=b"x")],
         "'lib/nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn'… (307 characters), a name of "
         "303 bytes, longer than the 255 a file name may have on this volume"),
        ([member("lib", tarfile.DIRTYPE, mode=0o755), member("lib", data=b"x")],
         "'lib', a file over a folder of the same name"),
        ([member("lib", tarfile.DIRTYPE, mode=0o755), member("lib", tarfile.SYMTYPE, linkname="x")],
         "'lib', a link over a folder of the same name"),
        ([member("lib", data=b"x"), member("lib", tarfile.DIRTYPE, mode=0o755)],
         "'lib', a folder over a file of the same name"),
        ([member("lib", data=b"x"), member("lib/util.py", data=b"x")],
         "'lib/util.py', a path through 'lib', which the archive makes a file"),
        ([member("x", tarfile.SYMTYPE, linkname="y"), member("x", data=b"x")],
         "'x', a file written over a link"),
        # Leaves the folder and comes back in by its name: inside only while the folder has that name.
        ([member("d", tarfile.SYMTYPE, linkname="."), member("e", tarfile.SYMTYPE, linkname="d/../code/x")],
         "'e', a link to 'd/../code/x' outside the folder"),
        ([member("long", tarfile.GNUTYPE_LONGNAME, data=b"a" * (2 * MiB)), member("x", data=b"x")],
         "'long', an extended header (a long name or pax records) of 2 MiB"),
    ],
    ids=["loop", "path through a loop", "loop made later", "300-character name", "file over folder",
         "link over folder", "folder over file", "path through a file", "file over link", "re-entering link",
         "extended header of 2 MiB"],
)  # fmt: skip
def test_a_member_the_folder_cannot_take_is_refused_in_one_sentence(tmp_path, code, members, why):
    with pytest.raises(UserError) as error:
        extract_archive(archive(tmp_path, *members), code, "code.tar.gz")
    assert error.value.cause == f"the code archive code.tar.gz holds {why}; rebuild the archive without it"


def test_a_file_may_replace_a_file_and_a_link_a_file_as_an_appended_archive_does(tmp_path, code):
    path = archive(
        tmp_path,
        member("train.py", data=b"old"),
        member("train.py", data=b"new"),
        member("util.py", data=b"x"),
        member("util.py", tarfile.SYMTYPE, linkname="train.py"),
    )
    assert extract_archive(path, code, "code.tar.gz").members == 4
    assert (code / "train.py").read_text() == "new"
    assert (code / "util.py").read_text() == "new"


def test_too_many_members_for_the_limit_or_for_the_volume_are_refused(tmp_path, code):
    path = archive(tmp_path, *[member(f"f{i}.py") for i in range(60)])
    with pytest.raises(UserError) as error:
        extract_archive(path, code, "code.tar.gz", ArchiveLimits(GiB, 50))
    assert error.value.cause.startswith(
        "the code archive code.tar.gz holds more than 50 members, the limit the hyperparameter "
        "sagetrain_code_archive_max_members sets (at 'f50.py'); "
    )
    with pytest.raises(UserError) as error:
        extract_archive(path, tmp_path / "again", "code.tar.gz", room=Room(GiB, 1_010, 4096))
    assert error.value.cause == (
        "the code archive code.tar.gz holds more members than the code folder's volume has room for (at "
        "'f10.py': 1,010 files free, of which 1,000 stay free for the job's log and failure file); give the "
        "job a larger volume (VolumeSizeInGB) or an archive of fewer files"
    )


def _plain(tmp_path):
    return write_archive(
        tmp_path / "plain.tar", member("a.py", data=b"1"), member("b.py", data=b"2" * 600), mode="w"
    ).read_bytes()


def _spoiled(data, at, value=None):
    data = bytearray(data)
    data[at] = data[at] ^ 0xFF if value is None else value
    return bytes(data)


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (lambda plain: plain + b"junk", "holds data after its end-of-archive block (a damaged archive, or "
         "two joined); rebuild it as one tar file"),
        (lambda plain: plain + plain, "holds data after its end-of-archive block"),
        (lambda plain: _spoiled(plain, 1124), "cannot be read as a tar file (bad checksum at byte 1,024)"),
        (lambda plain: plain[:1024], "cannot be read as a tar file (it is cut off at byte 1,024)"),
        (lambda plain: plain[:1024 + 100], "cannot be read as a tar file (it is cut off at byte 1,024)"),
        (lambda plain: plain[:1024 + 512 + 100], "cannot be read as a tar file (unexpected end of data)"),
        (lambda plain: b"not a tar file", "cannot be read as a tar file (neither plain nor compressed with "
         "gzip, bzip2 or xz); rebuild it (tar czf)"),
        (lambda plain: b"\x1f\x8b" + b"not gzip" * 10, "cannot be read as a tar file (neither plain nor "
         "compressed with gzip, bzip2 or xz)"),
    ],
    ids=["data after the end", "two archives joined", "bad header", "cut at a header", "cut in a header",
         "cut in a member", "not a tar file", "gzip's signature, then no gzip"],
)  # fmt: skip
def test_a_damaged_archive_is_refused_in_one_sentence(tmp_path, code, spoil, why):
    path = tmp_path / "spoiled.tar"
    path.write_bytes(spoil(_plain(tmp_path)))
    with pytest.raises(UserError) as error:
        extract_archive(path, code, "code.tar")
    assert error.value.cause.startswith(f"the code archive code.tar {why}")


def test_a_chain_of_thousands_of_extended_headers_is_refused_in_one_sentence(tmp_path, code):
    """tarfile reads a pax header, then the next header, recursively: 2,000 in a row are an unreadable
    archive, not an internal error."""
    record = b"20 comment=xxxxxxxxx\n"
    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, len(record)
    block = pax.tobuf(tarfile.USTAR_FORMAT) + record.ljust(512, b"\0")
    data = tarfile.TarInfo("a.py")
    data.size = 1
    path = tmp_path / "chain.tar"
    path.write_bytes(block * 2000 + data.tobuf(tarfile.USTAR_FORMAT) + b"x".ljust(512, b"\0") + b"\0" * 1024)
    with pytest.raises(UserError) as error:
        extract_archive(path, code, "chain.tar")
    assert error.value.cause.startswith("the code archive chain.tar cannot be read as a tar file ("), error
    assert list(code.iterdir()) == []


def test_a_compressed_archive_whose_checksum_does_not_match_is_refused(tmp_path, code):
    path = archive(tmp_path, member("a.py", data=b"1" * 1000))
    path.write_bytes(_spoiled(path.read_bytes(), -6))  # the gzip trailer's CRC-32
    with pytest.raises(UserError, match=r"cannot be read as a tar file \(CRC check failed"):
        extract_archive(path, code, "code.tar.gz")


def test_bzip2_and_xz_archives_unpack_too(tmp_path, code):
    for mode in ("w:bz2", "w:xz"):
        path = write_archive(tmp_path / f"code.{mode[2:]}", member("train.py", data=b"x"), mode=mode)
        assert extract_archive(path, tmp_path / mode, "code").members == 1


def test_archives_as_tar_writes_them_unpack_in_the_gnu_and_pax_formats(tmp_path):
    # Names and link targets past the 100 bytes of a header: a GNU long name and long link, or pax records.
    long_name = "deep/" * 20 + "n" * 120 + ".py"
    long_target = "deep/" * 30 + "target.py"
    for form in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        path = tmp_path / f"format-{form}.tar.gz"
        with tarfile.open(path, "w:gz", format=form) as tar:
            tar.addfile(*member(long_name, data=b"long"))
            tar.addfile(*member("ünïcode.py", data=b"u"))
            tar.addfile(*member("link.py", tarfile.SYMTYPE, linkname=long_target))
        code = tmp_path / f"code-{form}"
        assert extract_archive(path, code, "code.tar.gz").members == 3
        assert (code / long_name).read_bytes() == b"long"
        assert (code / "ünïcode.py").read_bytes() == b"u"
        assert (code / "link.py").readlink() == Path(long_target)


def test_pax_global_records_apply_to_the_members_after_them(tmp_path):
    # As git archive writes one (the commit, as a comment).
    path = tmp_path / "git.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "0" * 40}) as tar:
        tar.addfile(*member("a.py", data=b"a"))
        tar.addfile(*member("b.py", data=b"b"))
    assert extract_archive(path, tmp_path / "git", "git.tar").members == 2
    # A path among them names the next member, as tarfile reads a whole archive.
    records = pax_records(path="renamed.py")
    path = block_archive(
        tmp_path / "renaming.tar",
        header_block("pax_global_header", tarfile.XGLTYPE, len(records)), padded(records),
        header_block("orig.py", size=1), padded(b"x"),
    )  # fmt: skip
    extract_archive(path, tmp_path / "renaming", "renaming.tar")
    assert [p.name for p in (tmp_path / "renaming").iterdir()] == ["renamed.py"]


def _pax(kind, name, records):
    return header_block(name, kind, len(records)) + padded(records)


@pytest.mark.parametrize(
    ("blocks", "why"),
    [
        ([_pax(tarfile.XHDTYPE, "././@PaxHeader", pax_records(comment="c" * (100 << 10))),
          header_block("a.py")],
         "'././@PaxHeader', an extended header (a long name or pax records) of 100 KiB"),
        # Global records add up: each applies to every member after it.
        ([_pax(tarfile.XGLTYPE, "pax_global_header", pax_records(comment="c" * (40 << 10))),
          header_block("a.py"),
          _pax(tarfile.XGLTYPE, "pax_global_header", pax_records(mtime="1" * (40 << 10))),
          header_block("b.py")],
         "'pax_global_header', an extended header (a long name or pax records) of 80 KiB"),
        # Version 0.1 of GNU's sparse files: its map in the records; the file named as tarfile reads it.
        ([_pax(tarfile.XHDTYPE, "././@PaxHeader",
               pax_records(**{"GNU.sparse.map": "0,1", "GNU.sparse.size": "10", "GNU.sparse.name": "sp"})),
          header_block("./GNUSparseFile.1/sp", size=1), padded(b"x")], "'sp', a sparse file"),
    ],
    ids=["pax records of 100 KiB", "global pax records adding up to 80 KiB", "sparse file, map in records"],
)  # fmt: skip
def test_pax_records_larger_than_any_real_ones_or_of_a_sparse_file_are_refused(tmp_path, code, blocks, why):
    path = block_archive(tmp_path / "pax.tar.gz", *blocks, compress=True)
    with pytest.raises(UserError) as error:
        extract_archive(path, code, "code.tar.gz")
    assert error.value.cause == f"the code archive code.tar.gz holds {why}; rebuild the archive without it"


@pytest.mark.parametrize(
    "claims",
    [
        [header_block("n.py", size=-1)],  # in base 256, as GNU's format writes numbers that do not fit
        [_pax(tarfile.XHDTYPE, "././@PaxHeader", pax_records(size="-5000")), header_block("n.py")],
    ],
    ids=["in its header", "in pax records"],
)
def test_a_member_claiming_a_negative_size_is_refused_as_damage(tmp_path, code, claims):
    # Counted in, it would take its size off what the members after it are weighed against.
    path = block_archive(tmp_path / "negative.tar", header_block("a.py", size=1), padded(b"x"), *claims)
    with pytest.raises(UserError) as error:
        extract_archive(path, code, "code.tar")
    assert error.value.cause.startswith("the code archive code.tar cannot be read as a tar file ("), error
    assert "at byte 1,024); rebuild it (tar czf)" in error.value.cause


def test_pax_records_are_read_by_their_lengths():
    key = b"GNU.sparse.major="
    assert holds_record(pax_records(path="x.py", **{"GNU.sparse.major": "1"}), key)
    assert not holds_record(pax_records(comment=" 1 GNU.sparse.major=1"), key)  # within a value
    assert not holds_record(pax_records(path="x.py"), key)
    assert not holds_record(b"not records", key)
    assert not holds_record(b"0 GNU.sparse.major=1\n", key)  # a length that cannot be


# tarfile's names that its documentation describes (Python 3.11): the code archive's modules use no other.
TARFILE_DOCUMENTED = {
    "open", "is_tarfile", "TarFile", "TarInfo", "TarError", "ReadError", "CompressionError", "StreamError",
    "ExtractError", "HeaderError", "ENCODING", "USTAR_FORMAT", "GNU_FORMAT", "PAX_FORMAT", "DEFAULT_FORMAT",
    "REGTYPE", "AREGTYPE", "LNKTYPE", "SYMTYPE", "DIRTYPE", "FIFOTYPE", "CONTTYPE", "CHRTYPE", "BLKTYPE",
    "GNUTYPE_SPARSE",
}  # fmt: skip


def _tarfile_names(tree: ast.Module) -> set[str]:
    """The names of tarfile a module uses: ``tarfile.X``, and what it imports from tarfile."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "tarfile":
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module == "tarfile":
            names.update(alias.name for alias in node.names)
    return names


def test_the_archive_modules_use_only_what_tarfile_documents():
    program = Path(__file__).resolve().parents[2] / "container" / "src" / "sagetrain" / "program"
    modules = sorted(program.glob("archive*.py"))
    assert [path.name for path in modules] == ["archive.py", "archive_budget.py", "archive_stream.py"]
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = _tarfile_names(tree)
        assert used <= TARFILE_DOCUMENTED, (path.name, used - TARFILE_DOCUMENTED)
        # No private attribute of anything (a method to override, a TarFile's own state), no subclass.
        nodes = list(ast.walk(tree))
        private = {n.attr for n in nodes if isinstance(n, ast.Attribute) and n.attr.startswith("_")}
        assert {name for name in private if not name.endswith("__")} == set(), (path.name, private)
        bases = [ast.unparse(base) for n in nodes if isinstance(n, ast.ClassDef) for base in n.bases]
        assert [base for base in bases if base.startswith("tarfile.")] == [], (path.name, bases)


# --- the code folder: all of an archive or nothing of it, and a restart never runs what was left -------


def test_code_state_trusts_only_a_finished_unpacking_of_the_same_archive():
    done = Unpacked("s3://b/code.tar.gz", complete=True)
    assert code_state(True, done, "s3://b/code.tar.gz") is CodeState.UNPACKED
    assert code_state(True, Unpacked("s3://b/code.tar.gz", complete=False), "s3://b/code.tar.gz") is (
        CodeState.TO_UNPACK
    )
    assert code_state(True, done, "s3://b/other.tar.gz") is CodeState.TO_UNPACK
    assert code_state(False, done, "s3://b/code.tar.gz") is CodeState.TO_UNPACK  # emptied since
    assert code_state(False, None, "s3://b/code.tar.gz") is CodeState.TO_UNPACK
    # Files put there another way (the image's code): used as sagemaker_training uses them.
    assert code_state(True, None, "s3://b/code.tar.gz") is CodeState.FOREIGN


def _leftovers(tmp_path, code):
    return sorted(
        p.relative_to(tmp_path).as_posix()
        for p in tmp_path.rglob("*")
        if p != code and code not in p.parents and p.suffix != ".gz" and p != record_path(code)
    )


def hostile():
    return member("train.py", data=b"print('ran')\n"), member("out", tarfile.SYMTYPE, linkname="/etc")


def test_a_refused_archive_leaves_nothing_in_the_code_folder_and_is_refused_again(tmp_path, code):
    code.mkdir(parents=True)
    path = archive(tmp_path, *hostile())
    for _ in range(2):
        with pytest.raises(UserError, match="holds 'out', a link to '/etc' outside the folder"):
            unpack_code(path, code, "s3://b/code.tar.gz", ArchiveLimits(GiB, 100))
        assert list(code.iterdir()) == []
        assert _leftovers(tmp_path, code) == ["ml"]  # no unpacking folder left beside the code folder
        assert read_record(code) == Unpacked("s3://b/code.tar.gz", complete=False)


def test_an_unpacking_is_recorded_once_it_is_in_place(tmp_path, code):
    path = archive(tmp_path, member("train.py", data=b"print('ran')\n"))
    unpack_code(path, code, "s3://b/code.tar.gz", ArchiveLimits(GiB, 100))
    assert [p.name for p in code.iterdir()] == ["train.py"]
    assert json.loads(record_path(code).read_text()) == {"source": "s3://b/code.tar.gz", "complete": True}
    assert stat.S_IMODE(code.stat().st_mode) & 0o755 == 0o755


@pytest.mark.parametrize("mounted", [False, True], ids=["folder", "volume mounted on the folder"])
def test_what_an_interrupted_unpacking_left_is_cleared_not_run(tmp_path, code, mounted):
    # As a kill in the middle leaves it: the record says unfinished, part of the code is in place, and
    # beside it the folder it was being unpacked into.
    code.mkdir(parents=True)
    (code / "train.py").write_text("print('left over')\n")
    (code / "stale.py").write_text("")
    write_record(code, Unpacked("s3://b/code.tar.gz", complete=False))
    (tmp_path / "ml" / ".code.sagetrain-unpacking").mkdir()
    path = archive(tmp_path, member("train.py", data=b"print('from the archive')\n"))
    unpack_code(path, code, "s3://b/code.tar.gz", ArchiveLimits(GiB, 100), mounted=mounted)
    assert sorted(p.name for p in code.iterdir()) == ["train.py"]
    assert (code / "train.py").read_text() == "print('from the archive')\n"
    assert _leftovers(tmp_path, code) == ["ml"]
    assert read_record(code) == Unpacked("s3://b/code.tar.gz", complete=True)


def test_locate_code_unpacks_once_and_uses_files_put_there_another_way(tmp_path):
    paths = Paths(tmp_path / "ml")
    path = archive(tmp_path, member("train.py", data=b"x = 1\n"))
    settings = JobSettings(submit_directory=str(path))
    assert locate_code(paths, settings) == paths.code_dir
    (paths.code_dir / "train.py").write_text("x = 2\n")  # not unpacked again: a restart keeps it
    assert locate_code(paths, settings) == paths.code_dir
    assert (paths.code_dir / "train.py").read_text() == "x = 2\n"
    record_path(paths.code_dir).unlink()  # no record: the image's own code, used as it is
    assert locate_code(paths, settings) == paths.code_dir
    assert (paths.code_dir / "train.py").read_text() == "x = 2\n"


def test_locate_code_applies_the_hyperparameters_limits(tmp_path):
    path = archive(tmp_path, member("a.py"), member("b.py"))
    settings = JobSettings(submit_directory=str(path), launch=LaunchSettings(code_archive_max_members=1))
    with pytest.raises(UserError, match="more than 1 members, the limit the hyperparameter sagetrain_code_"):
        locate_code(Paths(tmp_path / "ml"), settings)
