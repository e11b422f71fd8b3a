"""Figures 13 and 14, each host's container command: the managed trainer (the image's ``train``, which
runs channel_model.py on every rank) and the plain tf.data readers (plain_channel_read.py), one after the
other in the order given, in the same container and on the same channel files.

``python channel_job.py PLAN_JSON``; the plan: ``order`` (["trainer", "plain"] or the reverse),
``slots`` (ranks per host), ``sharded`` (ShardedByS3Key: this host's files are its own, split between its
slots; FullyReplicated: all hosts' readers split every file), ``batch``, ``passes``, ``image_shape``.
Exits with the trainer's exit code, or 1 if a plain reader failed.
"""

import json
import subprocess
import sys
from pathlib import Path

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


def run_plain(plan: dict) -> int:
    readers = []
    for name, index, count in reader_places(plan):
        arguments = [str(CHANNEL), name, str(index), str(count), str(plan["batch"]), str(plan["passes"])]
        command = [
            sys.executable,
            str(CODE / "plain_channel_read.py"),
            *arguments,
            json.dumps(plan["image_shape"]),
        ]
        readers.append(subprocess.Popen(command, cwd=CODE))
    return max(reader.wait() for reader in readers)


def main() -> int:
    plan = json.loads(sys.argv[1])
    trainer_code = plain_code = 0
    for step in plan["order"]:
        if step == "trainer":
            trainer_code = subprocess.run(["train"], check=False).returncode
            print(f"BENCH trainer_exit code={trainer_code}", flush=True)
        else:
            plain_code = run_plain(plan)
    return trainer_code or (1 if plain_code else 0)


if __name__ == "__main__":
    sys.exit(main())
