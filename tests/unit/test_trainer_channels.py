"""The job as a trainer rank sees it, and channel planning on real folders, without TensorFlow."""

import gc
import json
import os
from pathlib import Path

import pytest
from sagetrain.config.channels import Channel, InputMode, S3Distribution
from sagetrain.config.job_files import JobFiles
from sagetrain.contracts import RankPlace
from sagetrain.engines import Engine
from sagetrain.errors import PlatformError, UserError
from sagetrain.trainer import channels as trainer_channels
from sagetrain.trainer.channels import DataFormat, format_of, list_data_files, open_channel
from sagetrain.trainer.job import trainer_job
from sagetrain.trainer.sharding import ShardLevel

HOST = "algo-1"


def environ(root, **extra):
    return {"SAGEMAKER_BASE_DIR": str(root), **extra}


TRAIN_ONLY = (Channel("train"),)


def write_job(root, hyperparameters=None, channels=TRAIN_ONLY):
    JobFiles((HOST,), hyperparameters or {}, tuple(channels)).write(root, HOST)


def make_files(directory, names_and_sizes):
    directory.mkdir(parents=True, exist_ok=True)
    for name, size in names_and_sizes:
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(b"x" * size)


def train_dir(root):
    return root / "input" / "data" / "train"


def place(rank, local_rank, size, local_size):
    return RankPlace(rank=rank, size=size, local_rank=local_rank, local_size=local_size)


def test_the_trainer_reads_the_launchers_configuration_and_its_place(tmp_path):
    train = Channel("train", InputMode.FAST_FILE, S3Distribution.SHARDED_BY_S3_KEY)
    write_job(tmp_path, {"epochs": 3, "sagemaker_program": "x"}, (train, Channel("test")))
    env = environ(
        tmp_path,
        SAGETRAIN_ENGINE="horovod",
        SAGETRAIN_RANK="3",
        SAGETRAIN_SIZE="4",
        SAGETRAIN_LOCAL_RANK="1",
        SAGETRAIN_LOCAL_SIZE="2",
        SM_CURRENT_HOST="algo-2",
        SM_LOG_LEVEL="30",
    )
    job = trainer_job(env)
    assert job.engine is Engine.HOROVOD
    assert job.ranks == place(3, 1, 4, 2)
    assert (job.current_host, job.notes.level) == ("algo-2", 30)
    bare = trainer_job(environ(tmp_path))
    assert (bare.current_host, bare.notes.level) == (None, 20), "run without the launcher: INFO, no host"
    assert dict(job.hyperparameters) == {"epochs": 3}
    channel = job.channel("train")
    assert (job.paths.channel_dir(channel.name), channel.input_mode, channel.s3_distribution) == (
        tmp_path / "input" / "data" / "train",
        InputMode.FAST_FILE,
        S3Distribution.SHARDED_BY_S3_KEY,
    )
    assert job.paths.channel_dir(job.channel("test").name) == tmp_path / "input" / "data" / "test"
    assert job.paths.model_dir == tmp_path / "model"
    assert job.checkpoint_dir == tmp_path / "checkpoints"
    # The job's checkpoint configuration names another folder (the SDKs' checkpoint_local_path).
    config_file = tmp_path / "input" / "config" / "checkpointconfig.json"
    config_file.write_text(json.dumps({"LocalPath": "/opt/ml/checkpoints/run-2", "S3Uri": "s3://b/c"}))
    assert trainer_job(env).checkpoint_dir == tmp_path / "checkpoints" / "run-2"
    config_file.write_text(json.dumps({"LocalPath": "/scratch/ckpt"}))
    assert trainer_job(env).checkpoint_dir == Path("/scratch/ckpt")


def test_hyperparameters_are_decoded_from_their_json_strings(tmp_path):
    write_job(tmp_path)
    (tmp_path / "input" / "config" / "hyperparameters.json").write_text('{"epochs": "2", "name": "\\"a\\""}')
    assert dict(trainer_job(environ(tmp_path)).hyperparameters) == {"epochs": 2, "name": "a"}


@pytest.mark.parametrize(
    ("extra", "error", "message"),
    [
        ({"SAGETRAIN_ENGINE": "mpi"}, PlatformError, "SAGETRAIN_ENGINE='mpi' is not one of"),
        ({"SAGETRAIN_RANK": "2", "SAGETRAIN_SIZE": "2"}, PlatformError, "are inconsistent"),
        ({"SAGETRAIN_SIZE": "two"}, PlatformError, "SAGETRAIN_SIZE must be an integer"),
        (
            {"SM_LOG_LEVEL": "loud"},
            PlatformError,
            "SM_LOG_LEVEL='loud' in the trainer's environment is not a",
        ),
    ],
)
def test_bad_environment_is_named(tmp_path, extra, error, message):
    write_job(tmp_path)
    with pytest.raises(error, match=message):
        trainer_job(environ(tmp_path, **extra))


def test_a_bad_hyperparameters_file_is_named(tmp_path):
    write_job(tmp_path)
    (tmp_path / "input" / "config" / "hyperparameters.json").write_text("{")
    with pytest.raises(UserError, match=r"hyperparameters\.json is not valid JSON"):
        trainer_job(environ(tmp_path))


def spec_for(tmp_path, distribution="FullyReplicated", mode="File"):
    write_job(tmp_path, channels=(Channel("train", InputMode(mode), S3Distribution(distribution)),))
    return trainer_job(environ(tmp_path)).channel("train")


def test_file_level_shards_of_a_channel_cover_each_file_once(tmp_path):
    make_files(
        tmp_path / "input" / "data" / "train",
        [("a.tfrecord", 50), ("b.tfrecord", 10), ("c.tfrecord", 40), (".hidden", 5), ("sub/d.tfrecord", 30)],
    )
    spec = spec_for(tmp_path)
    channels = [
        open_channel(spec, train_dir(tmp_path), place(rank, rank, 2, 2), reader_needs_format=True)
        for rank in range(2)
    ]
    assert all(channel.data_format is DataFormat.TFRECORD for channel in channels)
    assert all(channel.shard.level is ShardLevel.FILE for channel in channels)
    names = sorted(Path(path).name for channel in channels for path in channel.files)
    assert names == ["a.tfrecord", "b.tfrecord", "c.tfrecord", "d.tfrecord"]


def test_sharded_by_s3_key_splits_between_local_ranks_only(tmp_path):
    make_files(tmp_path / "input" / "data" / "train", [("a.npz", 10), ("b.npz", 10)])
    spec = spec_for(tmp_path, distribution="ShardedByS3Key")
    # Ranks 2 and 3 are local ranks 0 and 1 of the second host: they split that host's two files.
    shards = [
        open_channel(spec, train_dir(tmp_path), place(rank, rank - 2, 4, 2), reader_needs_format=True)
        for rank in (2, 3)
    ]
    assert [len(channel.files) for channel in shards] == [1, 1]
    assert shards[0].files != shards[1].files
    # Fully replicated, the same two files on four ranks are split by record instead.
    replicated = open_channel(
        spec_for(tmp_path), train_dir(tmp_path), place(3, 1, 4, 2), reader_needs_format=True
    )
    assert (replicated.shard.level, replicated.shard.record_index, replicated.shard.record_count) == (
        ShardLevel.RECORD,
        3,
        4,
    )


def test_npy_pairs_are_one_unit(tmp_path):
    make_files(
        tmp_path / "input" / "data" / "train",
        [("p0_x.npy", 8), ("p0_y.npy", 2), ("p1_x.npy", 8), ("p1_y.npy", 2)],
    )
    channel = open_channel(
        spec_for(tmp_path), train_dir(tmp_path), place(0, 0, 2, 2), reader_needs_format=True
    )
    assert channel.shard.level is ShardLevel.FILE
    assert [Path(path).name for path in channel.files] == ["p0_x.npy"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ([("a.csv", 1), ("b.npz", 1)], r"channel 'train' mixes file formats"),
        ([("a.parquet", 1)], r"channel 'train': no reader for files like a.parquet"),
        ([("a_x.npy", 1)], r"a_x.npy has no partner"),
        ([], r"channel 'train' has no files"),
    ],
)
def test_unreadable_channels_are_named(tmp_path, files, message):
    make_files(tmp_path / "input" / "data" / "train", files)
    with pytest.raises(UserError, match=message):
        open_channel(spec_for(tmp_path), train_dir(tmp_path), place(0, 0, 1, 1), reader_needs_format=True)


def test_pipe_mode_is_rejected_clearly(tmp_path):
    make_files(tmp_path / "input" / "data" / "train", [("a.npz", 1)])
    with pytest.raises(UserError, match=r"channel 'train' uses Pipe input mode.*input_mode='File'"):
        open_channel(
            spec_for(tmp_path, mode="Pipe"), train_dir(tmp_path), place(0, 0, 1, 1), reader_needs_format=True
        )
    os.mkfifo(tmp_path / "input" / "data" / "train_0")
    with pytest.raises(UserError, match="Pipe input mode"):
        open_channel(spec_for(tmp_path), train_dir(tmp_path), place(0, 0, 1, 1), reader_needs_format=True)


def test_empty_files_are_skipped_so_no_rank_is_left_without_data(tmp_path):
    # A data file and an empty one on two ranks: one readable file, so both ranks split it by record.
    make_files(tmp_path / "input" / "data" / "train", [("data.npz", 900), ("part.npz", 0), ("_SUCCESS", 0)])
    channels = [
        open_channel(
            spec_for(tmp_path), train_dir(tmp_path), place(rank, rank, 2, 2), reader_needs_format=True
        )
        for rank in range(2)
    ]
    assert [(channel.shard.level, channel.shard.record_index) for channel in channels] == [
        (ShardLevel.RECORD, 0),
        (ShardLevel.RECORD, 1),
    ]
    assert all([Path(path).name for path in channel.files] == ["data.npz"] for channel in channels)


def test_a_channel_of_empty_files_has_no_records(tmp_path):
    make_files(tmp_path / "input" / "data" / "train", [("a.npz", 0), ("b.npz", 0)])
    with pytest.raises(UserError, match=r"^channel 'train' has no records: its 2 file\(s\) in .* are empty"):
        open_channel(spec_for(tmp_path), train_dir(tmp_path), place(0, 0, 1, 1), reader_needs_format=True)


@pytest.mark.parametrize("enabled_before", [True, False])
def test_the_collector_is_off_while_listing_and_dealing_and_as_it_was_after_success_and_errors(
    tmp_path, monkeypatch, enabled_before
):
    make_files(train_dir(tmp_path), [("a.npz", 10), ("b.npz", 10)])
    make_files(tmp_path / "empty", [("a.npz", 0)])
    collector_on = []

    def watched(name):
        work = getattr(trainer_channels, name)

        def run(*args):
            collector_on.append((name, gc.isenabled()))
            return work(*args)

        monkeypatch.setattr(trainer_channels, name, run)

    watched("list_data_files")
    watched("deal_files")
    after = []
    (gc.enable if enabled_before else gc.disable)()
    try:
        open_channel(spec_for(tmp_path), train_dir(tmp_path), place(0, 0, 1, 1), reader_needs_format=True)
        after.append(gc.isenabled())
        with pytest.raises(UserError, match="are empty"):
            open_channel(spec_for(tmp_path), tmp_path / "empty", place(0, 0, 1, 1), reader_needs_format=True)
        after.append(gc.isenabled())
    finally:
        gc.enable()
    # The second call fails after its listing, before any deal.
    assert collector_on == [("list_data_files", False), ("deal_files", False), ("list_data_files", False)]
    assert after == [enabled_before, enabled_before]


def test_listing_gives_sizes_in_path_order_without_hidden_or_symlinked_folders(tmp_path):
    channel = tmp_path / "channel"
    make_files(
        channel,
        [
            ("b.tfrecord", 3),
            ("a/z.tfrecord", 2),
            ("a/.partial", 9),
            (".cache/c.tfrecord", 4),
            ("_SUCCESS", 0),
        ],
    )
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "d.tfrecord").write_bytes(b"x")
    (channel / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (channel / "e.tfrecord").symlink_to(channel / "b.tfrecord")  # a linked file is read as a file
    listed = list_data_files(channel)
    assert [(Path(item.path).relative_to(channel).as_posix(), item.size) for item in listed] == [
        ("_SUCCESS", 0),
        ("a/z.tfrecord", 2),
        ("b.tfrecord", 3),
        ("e.tfrecord", 3),
    ]


def test_npy_pairs_are_sized_from_the_listing_and_must_share_a_folder(tmp_path):
    make_files(
        tmp_path / "input" / "data" / "train",
        [("p0_x.npy", 8), ("p0_y.npy", 2), ("sub/p1_x.npy", 5), ("sub/p1_y.npy", 1)],
    )
    channel = open_channel(
        spec_for(tmp_path), train_dir(tmp_path), place(0, 0, 1, 1), reader_needs_format=True
    )
    assert [(Path(unit.path).name, unit.size) for unit in channel.shard.files] == [
        ("p0_x.npy", 10),
        ("p1_x.npy", 6),
    ]
    make_files(tmp_path / "input" / "data" / "train", [("other/p2_x.npy", 5), ("p2_y.npy", 1)])
    with pytest.raises(UserError, match=r"p2_x.npy has no partner"):
        open_channel(spec_for(tmp_path), train_dir(tmp_path), place(0, 0, 1, 1), reader_needs_format=True)


TRICKY_NAMES = [
    "/d/a.tfrecord", "/d/B.TFRecords", "/d/c.tfr", "/d/part.v2/d.csv", "/d/x.npz", "/d/y.NPY",
    "/d/dotted.dir/plain", "/d/noext", "/d/other.txt", "/d/.hidden.npz", "/d/ends.", "/d/t",
    "/d/u.tfrecord.gz", "/d/acsv", "/d/data.csv/npz", "/d/v.bnpz", "/d/v.Tfr", "/d/z.tfrecords",
    "/e/other.dir/plain",
]  # fmt: skip


@pytest.mark.parametrize("content_type", [None, "application/x-tfrecord", "text/csv"])
def test_a_channels_format_is_every_files_own(content_type):
    """The format is worked out once per distinct name ending: the same as asking about every file."""
    alone = {path: format_of("train", [path], content_type) for path in TRICKY_NAMES}
    for first in TRICKY_NAMES:
        for second in TRICKY_NAMES:
            paths = [first, second, first]
            if alone[first] is alone[second]:
                assert format_of("train", paths, content_type) is alone[first]
            else:
                with pytest.raises(UserError, match="mixes file formats"):
                    format_of("train", paths, content_type)


def listings_counted(monkeypatch):
    """Count the trainer's listings of a folder, as they happen."""
    calls = []
    original = trainer_channels.list_data_files

    def counted(directory):
        calls.append(directory)
        return original(directory)

    monkeypatch.setattr(trainer_channels, "list_data_files", counted)
    return calls


@pytest.mark.parametrize("distribution", ["FullyReplicated", "ShardedByS3Key"])
def test_a_hosts_ranks_share_one_listing_and_each_gets_its_own_share(tmp_path, monkeypatch, distribution):
    make_files(train_dir(tmp_path), [(f"part-{index}.tfrecord", 10 + index % 3) for index in range(12)])
    spec = spec_for(tmp_path, distribution)
    second_host = [place(2, 0, 4, 2), place(3, 1, 4, 2)]  # FullyReplicated: shares 2 and 3 of 4
    alone = [open_channel(spec, train_dir(tmp_path), rank, reader_needs_format=True) for rank in second_host]
    shared_in = tmp_path / "listings"
    shared_in.mkdir()
    calls = listings_counted(monkeypatch)
    shared = [
        open_channel(spec, train_dir(tmp_path), rank, reader_needs_format=True, shared_in=shared_in)
        for rank in second_host
    ]
    assert calls == [train_dir(tmp_path)], "listed by the first rank only"
    assert shared == alone
    assert shared[0].shard.level is ShardLevel.FILE and shared[0].files != shared[1].files


def test_a_shared_listing_of_another_folder_is_not_taken(tmp_path, monkeypatch):
    make_files(train_dir(tmp_path), [("a.tfrecord", 5), ("b.tfrecord", 5)])
    make_files(tmp_path / "other", [("c.tfrecord", 5), ("d.tfrecord", 5)])
    spec = spec_for(tmp_path)
    for folder, shared_in in (
        (tmp_path / "other", tmp_path / "other-listings"),
        (train_dir(tmp_path), tmp_path / "listings"),
    ):
        shared_in.mkdir()
        open_channel(spec, folder, place(0, 0, 2, 2), reader_needs_format=True, shared_in=shared_in)
    # The other folder's listing under this folder's name, as a stale or damaged file would be.
    (theirs,), (ours,) = (
        folder.glob("*.json") for folder in (tmp_path / "other-listings", tmp_path / "listings")
    )
    ours.write_bytes(theirs.read_bytes())
    calls = listings_counted(monkeypatch)
    channel = open_channel(
        spec,
        train_dir(tmp_path),
        place(1, 1, 2, 2),
        reader_needs_format=True,
        shared_in=tmp_path / "listings",
    )
    assert calls == [train_dir(tmp_path)]
    assert [Path(path).name for path in channel.files] == ["b.tfrecord"]


def test_only_a_rank_with_a_sibling_under_the_launcher_shares_listings(tmp_path):
    write_job(tmp_path)
    run = {"SAGETRAIN_RUN_DIR": str(tmp_path / "run")}
    two = {
        "SAGETRAIN_RANK": "1",
        "SAGETRAIN_SIZE": "2",
        "SAGETRAIN_LOCAL_RANK": "1",
        "SAGETRAIN_LOCAL_SIZE": "2",
    }
    one_per_host = {**two, "SAGETRAIN_LOCAL_RANK": "0", "SAGETRAIN_LOCAL_SIZE": "1"}
    assert trainer_job(environ(tmp_path, **run, **two)).listings_dir == tmp_path / "run" / "listings"
    assert trainer_job(environ(tmp_path, **run, **one_per_host)).listings_dir is None
    assert trainer_job(environ(tmp_path, **two)).listings_dir is None, "no launcher's run directory"


@pytest.mark.parametrize(
    ("names_and_sizes", "sentence"),
    [
        (
            [("a.tfrecord", 0), ("b.tfrecord", 0)],
            r"^channel 'train' has no records: its 2 file\(s\) in .* are empty",
        ),
        ([("a.bin", 5), ("b.bin", 5)], r"^channel 'train': no reader for files like a.bin"),
    ],
    ids=["listing fails", "no reader"],
)
def test_a_channel_that_fails_fails_every_rank_of_the_host_alike_listed_once(
    tmp_path, monkeypatch, names_and_sizes, sentence
):
    make_files(train_dir(tmp_path), names_and_sizes)
    spec = spec_for(tmp_path)
    shared_in = tmp_path / "listings"
    shared_in.mkdir()
    calls = listings_counted(monkeypatch)
    for rank in range(2):
        with pytest.raises(UserError, match=sentence):
            open_channel(
                spec,
                train_dir(tmp_path),
                place(rank, rank, 2, 2),
                reader_needs_format=True,
                shared_in=shared_in,
            )
    assert calls == [train_dir(tmp_path)]
