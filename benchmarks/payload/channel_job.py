"""Figures 13 and 14, each host's container command: the managed trainer (the image's ``train``, which
runs channel_model.py on every rank), the plain tf.data readers (plain_channel_read.py) and the trainer's
input path without training (input_path_read.py), one after the other in the order given, in the same
container and on the same channel files.

``python channel_job.py PLAN_JSON``; the plan: ``order`` (["trainer", "plain", "input"] or the reverse),
``slots`` (ranks per host), ``sharded`` (ShardedByS3Key: this host's files are its own, split between its
slots; FullyReplicated: all hosts' readers split every file), ``batch``, ``passes``, ``image_shape``.
Exits with the trainer's exit code, or 1 if a reader failed.
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from probe import PROBE_LABEL_VAR
from sagetrain.contracts import RankPlace

CHANNEL = Path("/opt/ml/input/data/train")
CODE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ReaderSlot:
    """One reader of this host: ``name`` (unique across hosts), the rank ``place`` it stands for (as mpirun
    places ranks: hosts in resourceconfig.json's order, ``-map-by slot``), and the plain reader's share,
    every ``count``-th file from the ``index``-th, the share a user would give that rank."""

    name: str
    place: RankPlace
    index: int
    count: int


def reader_slots(plan: dict) -> list[ReaderSlot]:
    resources = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
    slots, hosts = int(plan["slots"]), len(resources["hosts"])
    first = resources["hosts"].index(resources["current_host"]) * slots
    readers = []
    for slot in range(slots):
        place = RankPlace(rank=first + slot, size=hosts * slots, local_rank=slot, local_size=slots)
        # ShardedByS3Key: this host's files are its own, split between its slots; FullyReplicated: every
        # reader of every host takes its share of all files.
        index, count = (slot, slots) if plan["sharded"] else (place.rank, place.size)
        readers.append(ReaderSlot(str(place.rank), place, index, count))
    return readers


def reader_process(step: str, plan: dict, reader: ReaderSlot) -> subprocess.Popen[bytes]:
    if step == "plain":
        arguments = [str(CHANNEL), reader.name, str(reader.index), str(reader.count)]
        arguments += [str(plan["batch"]), str(plan["passes"]), json.dumps(plan["image_shape"])]
        return subprocess.Popen([sys.executable, str(CODE / "plain_channel_read.py"), *arguments], cwd=CODE)
    if step == "input":
        env = {**os.environ, **reader.place.to_env(), PROBE_LABEL_VAR: f"impl=input reader={reader.name}"}
        command = [sys.executable, str(CODE / "input_path_read.py"), reader.name, str(plan["passes"])]
        return subprocess.Popen(command, cwd=CODE, env=env)
    raise ValueError(f"unknown step {step!r}")


def run_readers(step: str, plan: dict) -> int:
    """1 if any reader failed (or was killed), else 0; waits for every reader."""
    processes = [reader_process(step, plan, slot) for slot in reader_slots(plan)]
    codes = [process.wait() for process in processes]
    return 1 if any(codes) else 0


def main() -> int:
    plan = json.loads(sys.argv[1])
    trainer_code = readers_code = 0
    for step in plan["order"]:
        if step == "trainer":
            trainer_code = subprocess.run(["train"], check=False).returncode
            print(f"BENCH trainer_exit code={trainer_code}", flush=True)
        else:
            readers_code = run_readers(step, plan) or readers_code
    return trainer_code or readers_code


if __name__ == "__main__":
    sys.exit(main())
