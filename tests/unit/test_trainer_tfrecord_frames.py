"""Counting TFRecord records from frame headers, without TensorFlow (the image's tests compare the counts
with TensorFlow's reader on files TensorFlow wrote)."""

import os
import re
import struct
from pathlib import Path

import pytest
from sagetrain.trainer.tfrecord_frames import FrameError, count_files, count_records, crc32c, masked_crc32c

# How TensorFlow frames the record b"abc" (tests/integration/image/test_trainer_input_path.py checks it
# against tf.io.TFRecordWriter in the image).
TENSORFLOW_FRAME_ABC = bytes.fromhex("0300000000000000b099490e6162636e57f121")


def frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return (
        length + struct.pack("<I", masked_crc32c(length)) + record + struct.pack("<I", masked_crc32c(record))
    )


def write(path, records):
    path.write_bytes(b"".join(frame(record) for record in records))
    return str(path)


def test_crc32c_is_castagnoli():
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    assert crc32c(b"") == 0


def test_frames_as_tensorflow_writes_them():
    assert frame(b"abc") == TENSORFLOW_FRAME_ABC


def test_counts_records_of_every_size(tmp_path):
    records = [b"", b"a", b"x" * 70_000, b"\x00" * 12, b"last"]
    assert count_records(write(tmp_path / "data.tfrecord", records)) == len(records)
    assert count_records(write(tmp_path / "empty.tfrecord", [])) == 0


def test_a_file_cut_inside_a_frame_is_truncated_unless_inside_its_header(tmp_path):
    """As TensorFlow's reader reads it (the image's tests compare the two on every cut): a file that ends
    within a frame's 12 header bytes ends there; one that ends after them is truncated."""
    frames = [frame(record) for record in (b"first", b"second record", b"3")]
    starts = [sum(len(item) for item in frames[:index]) for index in range(len(frames))]
    whole = b"".join(frames)
    path = tmp_path / "cut.tfrecord"
    for cut in range(len(whole) + 1):
        path.write_bytes(whole[:cut])
        started = max((start for start in starts if start <= cut), default=0)
        complete = sum(1 for start, item in zip(starts, frames, strict=True) if start + len(item) <= cut)
        if cut - started < 12 or cut == len(whole):
            assert count_records(str(path)) == complete, cut
        else:
            with pytest.raises(
                FrameError, match=rf"^truncated record at {started} in {re.escape(str(path))}$"
            ):
                count_records(str(path))


def test_a_damaged_length_or_other_data_is_corrupted(tmp_path):
    good = frame(b"record")
    damaged = bytearray(good)
    damaged[1] ^= 0x01  # the length no longer matches its CRC
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(good + bytes(damaged))
    with pytest.raises(FrameError, match=rf"^corrupted record at {len(good)} in {re.escape(str(path))}$"):
        count_records(str(path))
    text = tmp_path / "notes.tfrecord"
    text.write_text("id,label\n1,2\n3,4\n")
    with pytest.raises(FrameError, match=r"^(corrupted|truncated) record at 0 in "):
        count_records(str(text))


@pytest.mark.parametrize("concurrent_opens", [False, True], ids=["one-after-another", "threads"])
def test_many_files_are_counted_in_order_and_the_first_damaged_one_is_named(tmp_path, concurrent_opens):
    paths = [write(tmp_path / f"part-{index:04d}.tfrecord", [b"r"] * (index % 3)) for index in range(600)]
    assert count_files(paths, concurrent_opens) == tuple(index % 3 for index in range(600))
    assert count_files(paths[:1], concurrent_opens) == (0,)
    assert count_files([], concurrent_opens) == ()
    for index in (300, 550):
        with Path(paths[index]).open("ab") as handle:
            handle.write(frame(b"cut short")[:14])
    with pytest.raises(FrameError, match=r"part-0300\.tfrecord$"):
        count_files(paths, concurrent_opens)


def test_a_length_seen_before_is_still_checked_against_its_own_crc(tmp_path):
    """A count remembers each length field's CRC; a later frame of the same length with a damaged CRC is
    still corrupted, in another file as in the same one."""
    good = frame(b"same size")
    damaged = bytearray(good)
    damaged[8] ^= 0x01  # the length's CRC, not the length
    first = write(tmp_path / "a.tfrecord", [b"same size"] * 3)
    second = tmp_path / "b.tfrecord"
    second.write_bytes(good + bytes(damaged))
    with pytest.raises(FrameError, match=rf"^corrupted record at {len(good)} in .*b\.tfrecord$"):
        count_files([first, str(second)])


def test_a_large_file_is_read_frame_by_frame_with_the_same_verdicts(tmp_path):
    """Past 64 KiB the count reads each header where it lies instead of the whole file: the same count,
    the same truncation."""
    records = [bytes([index]) * 20_000 for index in range(8)]
    path = Path(write(tmp_path / "large.tfrecord", records))
    whole = path.read_bytes()
    assert len(whole) > 1 << 16
    assert count_records(str(path)) == 8
    last = len(whole) - len(frame(records[-1]))
    for cut, verdict in ((last + 11, 7), (last + 12, "truncated"), (len(whole) - 1, "truncated")):
        path.write_bytes(whole[:cut])
        if verdict == "truncated":
            with pytest.raises(FrameError, match=rf"^truncated record at {last} in "):
                count_records(str(path))
        else:
            assert count_records(str(path)) == verdict


def test_a_short_read_of_a_small_file_is_not_taken_for_its_end(tmp_path, monkeypatch):
    """A file system may return fewer bytes than asked (FUSE, as FastFile mounts): the count then reads
    the file header by header instead of counting what one read returned."""
    path = write(tmp_path / "data.tfrecord", [b"r" * 100] * 6)
    real_pread = os.pread

    def short_pread(descriptor: int, length: int, offset: int) -> bytes:
        return real_pread(descriptor, length if length <= 12 else length // 3, offset)

    monkeypatch.setattr(os, "pread", short_pread)
    assert count_records(path) == 6
