"""The managed trainer's TFRecord input path against TensorFlow's own reader, on files TensorFlow wrote:
the frame-header count equals the records TensorFlow reads, a cut file fails the count exactly when
TensorFlow's reader fails on it, and a record-level shard reads each rank's own run of records and no
record past it."""

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from sagetrain.config.channels import Channel as ChannelConfig
from sagetrain.config.channels import InputMode
from sagetrain.trainer import readers
from sagetrain.trainer.channels import Channel, DataFormat
from sagetrain.trainer.sharding import DataFile, ShardLevel, plan_shard
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
    assert count_files(paths) == tuple(tensorflow_count(path) for path in paths)


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
    assert readers._tfrecord_share(channel)[1] == sum(tensorflow_count(path) for path in paths) == 15
    assert schedules == [mode is InputMode.FAST_FILE]


def test_a_record_level_shard_reads_each_ranks_run_once_and_nothing_outside_it(tmp_path, monkeypatch):
    """Three files (7, 0 and 9 records) on 4 ranks deal unevenly, so the shard is by record: every rank
    reads a contiguous run of the 16 records, and together they read each once, in path order. No rank
    opens a file before its run (ranks 2 and 3, whose runs lie in the last file, still read theirs once the
    first file is gone), nor reads a record past it (a record whose own CRC is damaged, which the count
    does not check and TensorFlow's reader does, fails only the rank whose run holds it)."""
    counts = (7, 0, 9)
    paths = [
        write_records(
            tmp_path / f"part-{index}.tfrecord", [f"{index}-{record}".encode() for record in range(count)]
        )
        for index, count in enumerate(counts)
    ]
    listing = [DataFile(path, Path(path).stat().st_size) for path in paths]

    def rank_share(rank: int) -> tuple[list[bytes], int]:
        shard = plan_shard(listing, rank, 4)
        assert shard.level is ShardLevel.RECORD
        channel = Channel(ChannelConfig("train"), tmp_path, tuple(paths), DataFormat.TFRECORD, shard)
        dataset, count = readers._tfrecord_share(channel)
        return [record.numpy() for record in dataset], count

    shares = [rank_share(rank) for rank in range(4)]
    assert [count for _, count in shares] == [len(records) for records, _ in shares] == [4, 4, 4, 4]
    everything = [
        f"{index}-{record}".encode() for index, count in enumerate(counts) for record in range(count)
    ]
    assert [record for records, _ in shares for record in records] == everything

    first_file = Path(paths[0]).read_bytes()
    Path(paths[0]).unlink()
    monkeypatch.setattr(readers, "count_files", lambda files, concurrent_opens: counts)
    with pytest.raises(tf.errors.NotFoundError):
        rank_share(0)
    assert [rank_share(rank) for rank in (2, 3)] == shares[2:]
    Path(paths[0]).write_bytes(first_file)

    data = bytearray(Path(paths[2]).read_bytes())
    data[-1] ^= 0x01  # the last record's own CRC: "2-8", the last of rank 3's run
    Path(paths[2]).write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        rank_share(3)
    assert [rank_share(rank) for rank in range(3)] == shares[:3]


def test_unshuffled_epochs_are_one_iterator_and_shuffled_epochs_each_have_their_own(tmp_path):
    """Every epoch reads each record once in exact batches. Unshuffled epochs from one begun at its first
    step to the last are one repeated pipeline, read by one iterator (a plain script's repeated dataset),
    ending with the last epoch; a resumed epoch skips its done steps and the next continues from a new
    iterator. A shuffled epoch is the epoch's own seeded order, the same one every time it is asked for
    (so a resumed run replays it)."""
    channel = Channel(ChannelConfig("train"), tmp_path, (), DataFormat.TFRECORD, plan_shard([], 0, 1))
    dataset = tf.data.Dataset.range(10).map(lambda value: (value, value))
    records = readers.RankRecords(channel, dataset, 10, readers.Reader("test", "none"))

    def epochs(batches: readers.EpochBatches, first: int, last: int, skip: int = 0) -> list[list[list[int]]]:
        """The labels of each epoch's batches, taken as the trainer's step takes them."""
        taken = []
        for epoch in range(first, last + 1):
            iterator = batches.iterator(epoch, skip if epoch == first else 0)
            steps = batches.steps - (skip if epoch == first else 0)
            taken.append([next(iterator)[1].numpy().tolist() for _ in range(steps)])
        return taken

    plain = readers.EpochBatches(
        records, sizes=(4, 3, 3), job_seed=7, shard_index=1, shuffle_buffer=0, last_epoch=3
    )
    assert plain.steps == 3
    iterators = []
    for epoch in (1, 2, 3):
        iterators.append(plain.iterator(epoch))
        taken = [next(iterators[-1])[1].numpy().tolist() for _ in range(3)]
        assert taken == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert iterators[1] is iterators[0] and iterators[2] is iterators[0]
    with pytest.raises(StopIteration):  # read up to the last epoch, no further
        next(iterators[0])

    resumed = readers.EpochBatches(
        records, sizes=(4, 3, 3), job_seed=7, shard_index=1, shuffle_buffer=0, last_epoch=3
    )
    assert epochs(resumed, 2, 3, skip=2) == [[[7, 8, 9]], [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]]
    # Epoch 1 asked for after epoch 3, out of turn: a new iterator starts at its first batch.
    assert epochs(resumed, 1, 1) == [[[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]]

    shuffled = readers.EpochBatches(
        records, sizes=(4, 3, 3), job_seed=7, shard_index=1, shuffle_buffer=10, last_epoch=3
    )
    first_two = epochs(shuffled, 1, 2)
    assert [[len(batch) for batch in batches] for batches in first_two] == [[4, 3, 3]] * 2
    assert all(
        sorted(record for batch in batches for record in batch) == list(range(10)) for batches in first_two
    )
    assert first_two[0] != first_two[1]
    assert epochs(shuffled, 2, 2) == [first_two[1]]
    assert epochs(shuffled, 2, 2, skip=1) == [first_two[1][1:]]


def test_a_repeated_pass_with_fewer_batches_fails_at_the_step_that_misses_its_batch(tmp_path):
    """Records that change between unshuffled epochs fail where a batch is missing, with an error the
    trainer tells from a reader's (came_up_short), instead of moving batches between epochs; a user's own
    assert_cardinality failing in the same place is not taken for it."""
    channel = Channel(ChannelConfig("train"), tmp_path, (), DataFormat.TFRECORD, plan_shard([], 0, 1))
    passes = []

    def shrinking() -> Iterator[int]:
        passes.append(1)
        yield from range(10 if len(passes) == 1 else 6)

    dataset = tf.data.Dataset.from_generator(shrinking, output_signature=tf.TensorSpec((), tf.int64))
    records = readers.RankRecords(
        channel, dataset.map(lambda value: (value, value)), 10, readers.Reader("test", "none")
    )

    def epoch_batches(records: readers.RankRecords, sizes: tuple[int, ...]) -> readers.EpochBatches:
        return readers.EpochBatches(
            records, sizes=sizes, job_seed=7, shard_index=1, shuffle_buffer=0, last_epoch=2
        )

    @tf.function
    def step(iterator: object) -> tf.Tensor:
        return next(iterator)[1]

    def failure(iterator: object, good_steps: int) -> tf.errors.OpError:
        for _ in range(good_steps):
            step(iterator)
        with pytest.raises(tf.errors.FailedPreconditionError) as raised:
            step(iterator)
        return raised.value

    batches = epoch_batches(records, (4, 3, 3))
    first = batches.iterator(1)
    assert [step(first).numpy().tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    second = batches.iterator(2)
    assert [step(second).numpy().tolist() for _ in range(2)] == [[0, 1, 2, 3], [4, 5]]
    error = failure(second, 0)
    assert batches.came_up_short(error, skip_steps=0)
    # A resumed epoch is a pipeline of its own, which asserts nothing.
    assert not batches.came_up_short(error, skip_steps=1)

    declared = tf.data.Dataset.range(10).apply(tf.data.experimental.assert_cardinality(12))
    says_12 = readers.RankRecords(
        channel, declared.map(lambda value: (value, value)), 12, readers.Reader("test", "none")
    )
    users_error = failure(epoch_batches(says_12, (4, 4, 4)).iterator(1), 2)
    assert "expected to contain 12 elements but contained only 10" in str(users_error)
    assert not epoch_batches(says_12, (4, 4, 4)).came_up_short(users_error, skip_steps=0)
