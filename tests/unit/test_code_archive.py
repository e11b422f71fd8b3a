"""Unpacking the code archive: what a hostile archive may not do (run/archive.py), on real files."""

import io
import stat
import tarfile

import pytest
from sagetrain.errors import UserError
from sagetrain.program.archive import extract_archive


def member(name, kind=tarfile.REGTYPE, data=b"", linkname="", mode=0o644):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.size = kind, linkname, mode, len(data)
    return info, io.BytesIO(data) if kind == tarfile.REGTYPE else None


def archive(tmp_path, *members):
    path = tmp_path / "sourcedir.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, data)
    return path


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
