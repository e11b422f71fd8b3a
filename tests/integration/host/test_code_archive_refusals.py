"""A hostile or damaged code archive (sagemaker_submit_directory) through the real entry: one sentence in
the failure file and exit code 1, nothing of it in the code folder or anywhere else in the tree, the
volume not filled, and a restart on the same tree that refuses it again instead of running what was left."""

import shutil
import tarfile

import pytest
from code_archives import (
    GiB,
    MiB,
    claiming_archive,
    gnu_sparse_archive,
    member,
    small_volume,
    write_archive,
    zeros,
)
from conftest import make_tree
from sagetrain.program.code import Unpacked, record_path, write_record

SCRIPT = b"import os\nopen(os.path.join(os.environ['SM_MODEL_DIR'], 'ran'), 'w').write('archive')\n"
LEFTOVER = "import os\nopen(os.path.join(os.environ['SM_MODEL_DIR'], 'ran'), 'w').write('leftover')\n"


def train_py():
    return member("train.py", data=SCRIPT)


def cut_off(path):
    """train.py, its data cut short (a download that stopped)."""
    whole = write_archive(path, train_py(), mode="w").read_bytes()
    path.write_bytes(whole[:700])
    return path


CASES = {
    "link leading outside": (
        lambda path: write_archive(path, train_py(), member("etc", tarfile.SYMTYPE, linkname="../../../etc")),
        "holds 'etc', a link to '../../../etc' outside the folder",
        {},
    ),
    "symlink loop": (
        lambda path: write_archive(
            path,
            train_py(),
            member("a", tarfile.SYMTYPE, linkname="b"),
            member("b", tarfile.SYMTYPE, linkname="a"),
        ),
        "holds 'b', a link in a loop, or a path through one",
        {},
    ),
    "300-character name": (
        lambda path: write_archive(path, train_py(), member("x" * 300 + ".py", data=b"")),
        "a name of 303 bytes, longer than the 255 a file name may have on this volume",
        {},
    ),
    "file over a folder": (
        lambda path: write_archive(
            path, train_py(), member("lib", tarfile.DIRTYPE, mode=0o755), member("lib", data=b"")
        ),
        "holds 'lib', a file over a folder of the same name",
        {},
    ),
    "sparse member claiming 8 GiB": (
        lambda path: gnu_sparse_archive(path, "big", 8 * GiB),
        "holds 'big', a sparse file",
        {},
    ),
    "member whose header claims 8 GiB": (
        lambda path: claiming_archive(path, "claims", 8 * GiB, b"x" * 10),
        "unpacks to more than 4 GiB (4,294,967,296 bytes), the limit the hyperparameter "
        "sagetrain_code_archive_max_bytes sets",
        {},
    ),
    "more members than the hyperparameter allows": (
        lambda path: write_archive(path, train_py(), *[member(f"f{i}.py") for i in range(10)]),
        "holds more than 5 members, the limit the hyperparameter sagetrain_code_archive_max_members sets",
        {"sagetrain_code_archive_max_members": 5},
    ),
    "archive cut off": (
        cut_off,
        "cannot be read as a tar file (unexpected end of data)",
        {},
    ),
}


def files_under(root):
    return {path.relative_to(root).as_posix() for path in root.rglob("*")}


def assert_refused(tree, expected):
    """One run: refused in one sentence, the program not run, nothing new in the tree but the report."""
    before = files_under(tree.root)
    code, output = tree.run()
    assert code == 1, output
    lines = tree.failure.read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("the code archive "), lines[0]
    assert expected in lines[0]
    assert "Traceback" not in output and "internal error" not in output
    assert list((tree.root / "code").iterdir()) == []
    assert not (tree.model_dir / "ran").exists()
    record = record_path(tree.root / "code").relative_to(tree.root).as_posix()
    assert files_under(tree.root) - before <= {"output/failure", "output/.sagetrain-report", record}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_archive_is_one_sentence_leaves_nothing_and_is_refused_again(job, tmp_path, case):
    build, expected, extra = CASES[case]
    archive = build(tmp_path / "sourcedir.tar.gz")
    tree = job({"sagemaker_program": "train.py", "sagemaker_submit_directory": str(archive), **extra})
    assert_refused(tree, expected)
    assert_refused(tree, expected)  # a restart on the same tree


@pytest.mark.timeout(120)
def test_a_gzip_bomb_is_refused_before_it_fills_the_volume(tmp_path):
    # 1 GiB of zeros in about 1 MB, unpacked onto a 64 MiB volume holding the whole /opt/ml tree.
    bomb = write_archive(tmp_path / "bomb.tar.gz", train_py(), zeros("zeros", GiB))
    assert bomb.stat().st_size < 2 * MiB
    with small_volume(tmp_path / "volume", "64m") as volume:
        tree = make_tree(
            volume, "host", hosts=["algo-1"], current="algo-1",
            hyperparameters={"sagemaker_program": "train.py", "sagemaker_submit_directory": str(bomb)},
        )  # fmt: skip
        for _ in range(2):
            assert_refused(tree, "unpacks to more than the code folder's volume has room for (at 'zeros': ")
            assert shutil.disk_usage(volume).used < MiB


@pytest.mark.timeout(60)
def test_what_an_interrupted_unpacking_left_never_runs(job, tmp_path):
    # As a kill in the middle of unpacking leaves the tree: part of the code in place, the record saying
    # the unpacking is unfinished.
    refused = CASES["link leading outside"][0](tmp_path / "refused.tar.gz")
    tree = job({"sagemaker_program": "train.py", "sagemaker_submit_directory": str(refused)})
    tree.write_code("train.py", LEFTOVER)
    write_record(tree.root / "code", Unpacked(str(refused), complete=False))
    assert_refused(tree, "holds 'etc', a link to '../../../etc' outside the folder")

    good = write_archive(tmp_path / "good.tar.gz", train_py())
    tree = job({"sagemaker_program": "train.py", "sagemaker_submit_directory": str(good)}, name="good")
    tree.write_code("train.py", LEFTOVER)
    write_record(tree.root / "code", Unpacked(str(good), complete=False))
    code, output = tree.run()
    assert code == 0, output
    assert (tree.model_dir / "ran").read_text() == "archive"
    assert [path.name for path in (tree.root / "code").iterdir()] == ["train.py"]
