"""Work a host's ranks would all do alike, made once and read back: real processes on one lock."""

import errno
import fcntl
import json
import multiprocessing
import os
import stat

import pytest
from sagetrain.errors import UserError
from sagetrain.trainer import host_once
from sagetrain.trainer.host_once import once_per_host


def counted_make(folder, value):
    """A ``make`` that leaves one file per call in ``folder`` (as a listing, with a few hundred file
    operations) and returns ``value``."""

    def make():
        for index in range(200):
            (folder / f"scratch-{os.getpid()}-{index}").touch()
        (folder / f"made-by-{os.getpid()}-{len(list(folder.glob('made-by-*')))}").touch()
        for index in range(200):
            (folder / f"scratch-{os.getpid()}-{index}").unlink()
        return value

    return make


def share(folder, makes_in, value, name="deal-x"):
    return once_per_host(folder, name, counted_make(makes_in, value), write=json.dumps, read=json.loads)


def rank(folder, makes_in, value, results, together):
    together.wait()  # every rank asks at once: without the lock, several would make it
    results.put(share(folder, makes_in, value))


def test_the_first_rank_makes_it_and_the_others_read_it_back(tmp_path):
    folder, makes_in = tmp_path / "listings", tmp_path / "made"
    folder.mkdir()
    makes_in.mkdir()
    context = multiprocessing.get_context("fork")
    results, together = context.Queue(), context.Barrier(6)
    ranks = [
        context.Process(target=rank, args=(folder, makes_in, {"files": [1, 2]}, results, together))
        for _ in range(6)
    ]
    for process in ranks:
        process.start()
    got = [results.get(timeout=60) for _ in ranks]
    for process in ranks:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert got == [{"files": [1, 2]}] * 6
    assert len(list(makes_in.glob("made-by-*"))) == 1, "made once for the host"
    assert stat.S_IMODE((folder / "deal-x.json").stat().st_mode) == 0o600


def test_without_a_folder_or_with_one_it_cannot_lock_in_every_rank_makes_it(tmp_path):
    makes_in = tmp_path / "made"
    makes_in.mkdir()
    assert share(None, makes_in, 1) == 1
    assert share(tmp_path / "missing", makes_in, 2) == 2
    assert share(tmp_path / "missing", makes_in, 3) == 3
    assert len(list(makes_in.iterdir())) == 3
    assert not (tmp_path / "missing").exists(), "a folder the launcher did not make is not made here"


def test_a_result_it_cannot_read_back_is_made_by_each_rank_itself(tmp_path):
    folder, makes_in = tmp_path / "listings", tmp_path / "made"
    folder.mkdir()
    makes_in.mkdir()
    (folder / "deal-x.json").write_text('{"cut short')
    assert [share(folder, makes_in, value) for value in ([4], [5])] == [[4], [5]]
    assert len(list(makes_in.iterdir())) == 2


def test_a_user_error_is_left_for_the_others_who_raise_it_without_making_it_again(tmp_path):
    folder = tmp_path / "listings"
    folder.mkdir()
    calls = []

    def failing():
        calls.append(1)
        raise UserError("channel 'train' has no files in /data; add data or remove the channel.")

    for _ in range(3):
        with pytest.raises(UserError, match=r"^channel 'train' has no files in /data; add data"):
            once_per_host(folder, "deal-x", failing, write=json.dumps, read=json.loads)
    assert calls == [1], "the first rank made it; the others raised its sentence"
    assert not (folder / "deal-x.json").exists()


def test_after_a_try_that_left_nothing_the_next_rank_makes_it_without_the_lock(tmp_path):
    folder = tmp_path / "listings"
    folder.mkdir()

    def failing():
        raise MemoryError

    with pytest.raises(MemoryError):
        once_per_host(folder, "deal-x", failing, write=json.dumps, read=json.loads)
    assert sorted(path.name for path in folder.iterdir()) == ["deal-x.lock"]

    def unlocked():
        # A lock of its own on the file succeeds only if the rank let go before making it: the ranks
        # after a failed try make it side by side, not one after another.
        descriptor = os.open(folder / "deal-x.lock", os.O_RDWR)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(descriptor)
        return 8

    assert once_per_host(folder, "deal-x", unlocked, write=json.dumps, read=json.loads) == 8


def test_a_user_error_quoting_a_name_that_is_not_utf8_reaches_every_rank(tmp_path):
    folder = tmp_path / "listings"
    folder.mkdir()
    sentence = "channel 'train': /data/a\udcff.npy has no partner; .npy files come in pairs."

    def failing():
        raise UserError(sentence)

    for _rank in range(2):
        with pytest.raises(UserError) as raised:
            once_per_host(folder, "deal-x", failing, write=json.dumps, read=json.loads)
        assert str(raised.value) == sentence
    assert sorted(path.name for path in folder.iterdir()) == ["deal-x.failure", "deal-x.lock"]


@pytest.mark.parametrize("left", [b"", b"\xff\xfe", b'""', b"[1]"])
def test_a_failure_file_that_is_no_sentence_is_as_good_as_none(tmp_path, left):
    folder = tmp_path / "listings"
    folder.mkdir()
    (folder / "deal-x.failure").write_bytes(left)
    assert once_per_host(folder, "deal-x", lambda: 3, write=json.dumps, read=json.loads) == 3


def test_whatever_reading_back_raises_the_rank_makes_it_itself(tmp_path):
    folder = tmp_path / "listings"
    folder.mkdir()
    for damaged in (b"[" * 100_000 + b"]" * 100_000, b"[\xff]"):  # RecursionError; UnicodeDecodeError
        (folder / "deal-x.json").write_bytes(damaged)
        assert once_per_host(folder, "deal-x", lambda: 9, write=json.dumps, read=json.loads) == 9


def test_a_folder_without_locks_has_every_rank_make_it(tmp_path, monkeypatch):
    folder, makes_in = tmp_path / "listings", tmp_path / "made"
    folder.mkdir()
    makes_in.mkdir()

    def no_locks(_descriptor, _operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(host_once.fcntl, "flock", no_locks)
    assert [share(folder, makes_in, value) for value in (1, 2)] == [1, 2]
    assert len(list(makes_in.iterdir())) == 2
    assert not (folder / "deal-x.json").exists()


def test_a_result_it_cannot_write_is_still_returned(tmp_path):
    folder = tmp_path / "listings"
    folder.mkdir()

    def unwritable(_value):
        raise OSError("disk full")

    assert once_per_host(folder, "deal-x", lambda: 7, write=unwritable, read=json.loads) == 7
    assert not (folder / "deal-x.json").exists()


def test_a_rank_that_cannot_mark_its_try_makes_it_for_itself_alone(tmp_path, monkeypatch):
    folder = tmp_path / "listings"
    folder.mkdir()

    def no_space(_descriptor, _data, _offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(host_once.os, "pwrite", no_space)
    assert once_per_host(folder, "deal-x", lambda: 5, write=json.dumps, read=json.loads) == 5
    assert sorted(path.name for path in folder.iterdir()) == ["deal-x.lock"]
