"""Where listing → first batch goes on a channel of many files (benchmarks/lab/listing_phases.py runs it),
for the managed trainer's own functions and for a plain tf.data script, and what the system calls the
trainer adds cost on their own. Script mode: run by ``train`` on 1 host with the channel as ``train``.

Each reader takes one share of ``SHARES`` of all files, as one of figure 13's 4 ranks of a FullyReplicated
channel does. For every number of the hyperparameter ``processes`` and every side, in the order of
``sides``, the script starts that many readers of the side at once in this container (shares 0, 1, …):

- ``trainer``: each rank's own listing (names and sizes), the channel's format, the deal, counting its
  share's records and building the parsed dataset (``rank_records``), and its first batch;
- ``shared``: the same, with the listing and deal made once per host (``open_channel`` with a folder to
  share them in) for readers 0-1 and 2-3 as figure 13's 2 hosts of 2 ranks, each pair with a folder of
  its own;
- ``plain``: the glob and sort, the parsed dataset, its first batch (as figure 13's plain reader);
- ``syscalls``: only the system calls the trainer makes and the plain script does not: a ``stat`` of
  every listed file, and opening, sizing, reading and closing each file of its share (the record count's).

Every reader has TensorFlow imported and its side's set-up done before its clock starts, and the readers
of a side start their first phase together (a pipe barrier with this script). A reader prints
``BENCH phase side=… processes=… reader=… name=… seconds=…`` per phase.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BATCH = 128
IMAGE_HP = {"image_shape": [28, 28, 1]}
SHARES = 4
RANKS_PER_HOST = 2
# The first argument of a reader this script starts (the job starts it with hyperparameter options).
READER = "--reader"

Phase = Callable[[str, Callable[[], Any]], Any]


def _plain(phase: Phase, channel: Path, index: int) -> None:
    import tensorflow as tf
    from channel_records import parse_image_record

    files = phase("glob and sort", lambda: sorted(str(path) for path in channel.glob("*.tfrecord")))
    dataset = phase(
        "dataset and parser",
        lambda: (
            tf.data.TFRecordDataset(files[index::SHARES])
            .map(lambda record: parse_image_record(record, IMAGE_HP), num_parallel_calls=tf.data.AUTOTUNE)
            .batch(BATCH)
            .prefetch(tf.data.AUTOTUNE)
        ),
    )
    phase("first batch", lambda: next(iter(dataset)))


def _syscalls(phase: Phase, channel: Path, index: int) -> None:
    from sagetrain.trainer.channels import list_data_files
    from sagetrain.trainer.sharding import plan_shard

    names = [entry.path for entry in os.scandir(channel)]
    # str paths, as the listing keeps them: a Path per file would be timed too
    phase("stat every listed file", lambda: [os.stat(path).st_size for path in names])  # noqa: PTH116
    share = plan_shard(list_data_files(channel), index, SHARES).files

    def open_size_read_close() -> None:
        for item in share:
            descriptor = os.open(item.path, os.O_RDONLY)
            os.pread(descriptor, os.fstat(descriptor).st_size, 0)
            os.close(descriptor)

    phase("open, size, read, close its share", open_size_read_close)


def _trainer(phase: Phase, channel: Path, index: int, shared_in: Path | None) -> None:
    from sagetrain.config.channels import Channel as ChannelConfig
    from sagetrain.contracts import RankPlace
    from sagetrain.trainer.channels import (
        Channel,
        collector_paused,
        format_of,
        list_data_files,
        open_channel,
        sharding_units,
    )
    from sagetrain.trainer.contract import load_module
    from sagetrain.trainer.readers import rank_records, read_batches
    from sagetrain.trainer.sharding import plan_shard

    module = load_module(Path(__file__).with_name("channel_model.py"))
    declared = ChannelConfig("train")
    if shared_in is not None:
        place = RankPlace(index, SHARES, index % RANKS_PER_HOST, RANKS_PER_HOST)
        opened = phase(
            "listing, format and deal, once per host",
            lambda: open_channel(declared, channel, place, reader_needs_format=True, shared_in=shared_in),
        )
    else:
        # As open_channel lists and deals: with Python's cyclic collector paused.
        with collector_paused():
            listed = phase("listing (names and sizes)", lambda: list_data_files(channel))
            readable = [item for item in listed if item.size > 0]
            data_format = phase("format", lambda: format_of("train", [item.path for item in readable], None))
            shard = phase(
                "deal", lambda: plan_shard(sharding_units("train", readable, data_format), index, SHARES)
            )
        opened = Channel(declared, channel, tuple(unit.path for unit in shard.files), data_format, shard)
    records = phase(
        "count and dataset (rank_records)", lambda: rank_records(opened, module, IMAGE_HP, "label")
    )
    phase("first batch", lambda: next(read_batches(records, records.dataset.batch(BATCH).take(1))))


def _host_folder(scratch: Path, index: int) -> Path:
    """Where reader ``index``'s host shares its listing: readers 0-1 stand for one host, 2-3 another."""
    return scratch / f"host-{index // RANKS_PER_HOST}"


def _reader(
    side: str, channel: Path, index: int, processes: int, scratch: Path, barrier: tuple[int, int]
) -> None:
    import tensorflow  # noqa: F401 - before any clock, in every side: the trainer's ranks have it imported

    waiting = [barrier]

    def phase(name: str, work: Callable[[], Any]) -> Any:
        if waiting:  # the side's readers start their first phase together, once all are set up
            ready, go = waiting.pop()
            os.write(ready, b".")
            os.read(go, 1)
        began = time.perf_counter()
        result = work()
        seconds = time.perf_counter() - began
        fields = f"side={side} processes={processes} reader={index} name={name} seconds={seconds:.6f}"
        os.write(sys.stdout.fileno(), f"BENCH phase {fields}\n".encode())  # one write: readers share it
        return result

    if side == "plain":
        _plain(phase, channel, index)
    elif side == "syscalls":
        _syscalls(phase, channel, index)
    else:
        shared_in = _host_folder(scratch, index) if side == "shared" else None
        _trainer(phase, channel, index, shared_in)


def _start_together(readers: list[subprocess.Popen[bytes]], ready: int, go: int) -> None:
    """Let the readers go once every one has said it is ready (or has died: then the pipe ends)."""
    said = 0
    while said < len(readers):
        chunk = os.read(ready, len(readers) - said)
        if not chunk:
            break
        said += len(chunk)
    os.write(go, b"." * len(readers))


def _run_all(channel: Path, hyperparameters: dict[str, Any]) -> None:
    for processes in hyperparameters["processes"]:
        for side in hyperparameters["sides"].split(","):
            with tempfile.TemporaryDirectory() as scratch:
                for first_of_host in range(0, SHARES, RANKS_PER_HOST):
                    _host_folder(Path(scratch), first_of_host).mkdir(mode=0o700)
                (ready_in, ready_out), (go_in, go_out) = os.pipe(), os.pipe()
                arguments = [READER, side, str(channel), str(processes), scratch, str(ready_out), str(go_in)]
                readers = [
                    subprocess.Popen(
                        [sys.executable, __file__, *arguments, str(index)], pass_fds=(ready_out, go_in)
                    )
                    for index in range(processes)
                ]
                os.close(ready_out)
                os.close(go_in)
                _start_together(readers, ready_in, go_out)
                os.close(ready_in)
                os.close(go_out)
                failed = [reader.args for reader in readers if reader.wait() != 0]
            if failed:
                raise SystemExit(f"readers failed: {failed}")


if __name__ == "__main__":
    if sys.argv[1:2] == [READER]:
        side, channel, processes, scratch, ready, go, index = sys.argv[2:9]
        _reader(side, Path(channel), int(index), int(processes), Path(scratch), (int(ready), int(go)))
    else:
        _run_all(Path(os.environ["SM_CHANNEL_TRAIN"]), json.loads(os.environ["SM_HPS"]))
