"""Figures 13 and 14, each host's container command: the managed trainer (the image's ``train``, which
runs channel_model.py on every rank), the plain tf.data readers (plain_channel_read.py) and the trainer's
input path without training (input_path_read.py), one after the other in the order given, in the same
container and on the same channel files.

``python channel_job.py PLAN_JSON``; the plan: ``order`` (a rotation of ["trainer", "plain", "input"]),
``slots`` (ranks per host), ``sharded`` (ShardedByS3Key: this host's files are its own, split between its
slots; FullyReplicated: all hosts' readers split every file), ``batch``, ``passes``, ``image_shape``.
Exits with the trainer's exit code, or 1 if a reader failed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from probe import PROBE_LABEL_VAR
from sagetrain.contracts import LOCAL_RANK_VAR, LOCAL_SIZE_VAR, RANK_VAR, SIZE_VAR

CHANNEL = Path("/opt/ml/input/data/train")
CODE = Path(__file__).resolve().parent


def reader_places(plan: dict) -> list[tuple[str, int, int]]:
    """(name, index, count) of this host's plain readers: reader ``index`` of ``count`` reads every
    ``count``-th file, the share a user would give that rank; names are unique across hosts."""
    resources = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
    slots = int(plan["slots"])
    host = sorted(resources["hosts"]).index(resources["current_host"])
    names = [str(host * slots + slot) for slot in range(slots)]
    if plan["sharded"]:
        return [(names[slot], slot, slots) for slot in range(slots)]
    count = slots * len(resources["hosts"])
    return [(names[slot], host * slots + slot, count) for slot in range(slots)]


def reader_command(step: str, plan: dict, name: str, index: int, count: int) -> list[str]:
    if step == "plain":
        arguments = [str(CHANNEL), name, str(index), str(count), str(plan["batch"]), str(plan["passes"])]
        return [
            sys.executable,
            str(CODE / "plain_channel_read.py"),
            *arguments,
            json.dumps(plan["image_shape"]),
        ]
    return [sys.executable, str(CODE / "input_path_read.py"), name, str(plan["passes"])]


def input_reader_env(plan: dict, name: str) -> dict[str, str]:
    """The environment of the input-path reader ``name``: the place of the rank it stands for (as the
    launcher gives a rank its place) and its probe's label."""
    slots = int(plan["slots"])
    resources = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
    rank = int(name)
    return {
        **os.environ,
        RANK_VAR: str(rank),
        LOCAL_RANK_VAR: str(rank % slots),
        SIZE_VAR: str(slots * len(resources["hosts"])),
        LOCAL_SIZE_VAR: str(slots),
        PROBE_LABEL_VAR: f"impl=input reader={name}",
    }


def run_readers(step: str, plan: dict) -> int:
    readers = []
    for name, index, count in reader_places(plan):
        env = input_reader_env(plan, name) if step == "input" else None
        readers.append(subprocess.Popen(reader_command(step, plan, name, index, count), cwd=CODE, env=env))
    return max(reader.wait() for reader in readers)


def main() -> int:
    plan = json.loads(sys.argv[1])
    trainer_code = readers_code = 0
    for step in plan["order"]:
        if step == "trainer":
            trainer_code = subprocess.run(["train"], check=False).returncode
            print(f"BENCH trainer_exit code={trainer_code}", flush=True)
        else:
            readers_code = run_readers(step, plan) or readers_code
    return trainer_code or (1 if readers_code else 0)


if __name__ == "__main__":
    sys.exit(main())
