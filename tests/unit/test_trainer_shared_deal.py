"""A channel's deal passed between a host's ranks: read back as written, and nothing else taken."""

import json
from pathlib import Path

import pytest
from sagetrain.trainer.sharding import DataFile, deal_files
from sagetrain.trainer.shared_deal import deal_from, deal_name, deal_text

FOLDER = Path("/opt/ml/input/data/train")


def listing(*sizes):
    return [DataFile(f"{FOLDER}/part-{index:03d}.tfr\udcff", size) for index, size in enumerate(sizes)]


@pytest.mark.parametrize("sizes", [(5, 5, 5, 5), (100, 1, 1)])  # dealt by file; by record
def test_a_deal_reads_back_as_it_was_written(sizes):
    deal = deal_files(listing(*sizes), 2)
    assert deal_from(deal_text(FOLDER, "tfrecord", deal), FOLDER, 2) == ("tfrecord", deal)


def written(**changes):
    document = json.loads(deal_text(FOLDER, "tfrecord", deal_files(listing(5, 5), 2)))
    return json.dumps({**document, **changes})


@pytest.mark.parametrize(
    "text",
    [
        written(folder="/opt/ml/input/data/validation"),
        written(members=3),
        written(paths=[], sizes=[], owners=[]),
        written(paths=["/etc/passwd", f"{FOLDER}/b"]),
        written(paths=[f"{FOLDER}/../../x", f"{FOLDER}/b"]),
        written(sizes=[5]),
        written(sizes=[5, "5"]),
        written(owners=[True, 0]),
        written(owners=[0, 2]),
        written(format=None),
        "[]",
    ],
    ids=[
        "folder",
        "members",
        "empty",
        "outside",
        "dotdot",
        "sizes",
        "size-type",
        "bool",
        "owner",
        "format",
        "list",
    ],
)
def test_anything_but_this_folders_deal_between_these_members_is_refused(text):
    with pytest.raises(ValueError):
        deal_from(text, FOLDER, 2)


def test_the_name_depends_on_the_folder_and_the_members_only():
    assert deal_name(FOLDER, 2) == deal_name(Path(str(FOLDER)), 2)
    assert len({deal_name(FOLDER, 2), deal_name(FOLDER, 4), deal_name(FOLDER.with_name("test"), 2)}) == 3
    assert deal_name(Path("/data/.."), 2).startswith("deal-") and "/" not in deal_name(Path("/data/.."), 2)
