"""The run directory's folders the launcher prepares at every start."""

import os
import stat

import pytest
from sagetrain.contracts import RunDir
from sagetrain.errors import PlatformError
from sagetrain.launch.run_dir import empty_listings


def test_every_start_gets_an_empty_listings_folder_of_its_own(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    run_dir.root.mkdir()
    empty_listings(run_dir)
    (run_dir.listings / "deal-x.json").write_text("[1]")
    (run_dir.listings / "deal-x.failure").write_text("an earlier start's sentence")
    old_umask = os.umask(0)
    try:
        empty_listings(run_dir)
    finally:
        os.umask(old_umask)
    assert list(run_dir.listings.iterdir()) == []
    assert stat.S_IMODE(run_dir.listings.stat().st_mode) == 0o700


def test_a_listings_folder_it_cannot_make_is_one_sentence_naming_it(tmp_path):
    run_dir = RunDir(tmp_path / "missing" / "run")
    with pytest.raises(PlatformError, match=r"^cannot make an empty folder .*/run/listings \(No such file"):
        empty_listings(run_dir)
