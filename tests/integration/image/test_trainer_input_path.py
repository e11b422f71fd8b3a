"""The managed trainer's TFRecord input path against TensorFlow's own reader, on files TensorFlow wrote:
the frame-header count equals the records TensorFlow reads, a cut file fails the count exactly when
TensorFlow's reader fails on it."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from sagetrain.config.channels import Channel as ChannelConfig
from sagetrain.config.channels import InputMode
from sagetrain.trainer import readers
from sagetrain.trainer.channels import Channel, DataFormat
from sagetrain.trainer.sharding import DataFile, plan_shard
from sagetrain.trainer.tfrecord_frames import FrameError, count_files, count_records

# The frame tests/unit/test_trainer_tfrecord_frames.py builds for b"abc", as TensorFlow writes it.
FRAME_ABC_HEX = "0300000000000000b099490e6162636e57f121"


def write_records(path: Path, records: list[bytes]) -> str:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return str(path)


def tensorflow_count(path: str) -> int:
    return int(tf.data.TFRecordDataset([path]).reduce(np.int64(0), lambda count, _: count + 1))


def test_tensorflow_frames_a_record_as_the_unit_tests_expect(tmp_path):
    path = write_records(tmp_path / "abc.tfrecord", [b"abc"])
    assert Path(path).read_bytes().hex() == FRAME_ABC_HEX


def test_header_count_equals_tensorflows_on_records_of_every_size(tmp_path):
    rng = np.random.default_rng(5)
    paths = []
    for index in range(40):
        sizes = rng.integers(0, 90_000 if index % 7 == 0 else 600, size=int(rng.integers(0, 9)))
        records = [rng.bytes(int(size)) for size in sizes]
        paths.append(write_records(tmp_path / f"part-{index:03d}.tfrecord", records))
    for path in paths:
        assert count_records(path) == tensorflow_count(path), path
    assert count_files(paths) == sum(tensorflow_count(path) for path in paths)


@pytest.mark.parametrize("first_record_bytes", [5, 70_000], ids=["read-whole", "read-frame-by-frame"])
def test_a_cut_file_fails_the_count_exactly_when_tensorflow_fails_to_read_it(tmp_path, first_record_bytes):
    """Every cut of a small file (counted from one read of it), and of one past 64 KiB (counted header by
    header) every cut of its last two frames, from the boundary before them."""
    records = [b"f" * first_record_bytes, b"", b"x" * 300]
    whole = Path(write_records(tmp_path / "whole.tfrecord", records))
    data = whole.read_bytes()
    cut = tmp_path / "cut.tfrecord"
    last_two_frames = 16 + 316  # b"" and b"x" * 300, each with 12 header and 4 CRC bytes
    lengths = range(len(data)) if len(data) < 1 << 16 else range(len(data) - last_two_frames, len(data))
    for length in lengths:
        cut.write_bytes(data[:length])
        try:
            expected: int | None = tensorflow_count(str(cut))
        except tf.errors.DataLossError:
            expected = None
        if expected is None:
            with pytest.raises(FrameError, match="truncated record at"):
                count_records(str(cut))
        else:
            assert count_records(str(cut)) == expected, length


@pytest.mark.parametrize("mode", [InputMode.FILE, InputMode.FAST_FILE])
def test_the_reader_counts_on_threads_only_for_files_fetched_on_open(tmp_path, mode, monkeypatch):
    """FastFile's files wait on the network at every open, so their count opens several at once; local
    files are counted one after another (threads there only contend for the interpreter)."""
    paths = [write_records(tmp_path / f"part-{index}.tfrecord", [b"r"] * (index + 1)) for index in range(5)]
    shard = plan_shard([DataFile(path, Path(path).stat().st_size) for path in paths], 0, 1)
    channel = Channel(ChannelConfig("train", mode), tmp_path, tuple(paths), DataFormat.TFRECORD, shard)
    schedules = []

    def recorded(files, *, concurrent_opens):
        schedules.append(concurrent_opens)
        return count_files(files, concurrent_opens=concurrent_opens)

    monkeypatch.setattr(readers, "count_files", recorded)
    assert readers._tfrecord_count(channel) == sum(tensorflow_count(path) for path in paths) == 15
    assert schedules == [mode is InputMode.FAST_FILE]
