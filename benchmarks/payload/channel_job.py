"""Figures 13 and 14, each host's container command: the managed trainer (the image's ``train``, which
runs channel_model.py on every rank), the plain tf.data readers (plain_channel_read.py) and the trainer's
input path without training (input_path_read.py), one after the other in the order given, in the same
container and on the same channel files.

``python channel_job.py PLAN_JSON``; the plan: ``order`` (["trainer", "plain", "input"] or the reverse),
``slots`` (ranks per host), ``sharded`` (ShardedByS3Key: this host's files are its own, split between its
slots; FullyReplicated: all hosts' readers split every file), ``batch``, ``passes``, ``image_shape``,
``start_together`` (a folder every host mounts, where the first host lets each side's readers start
their timed passes together, and every host begin a step only once all have ended the one before:
start_together.py). Exits with the trainer's exit code, or 1 if a reader failed.
"""

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from probe import PROBE_LABEL_VAR
from sagetrain.contracts import RUN_DIR_VAR, RankPlace, RunDir
from start_together import FOLDER_VAR, release_together, wait_for_the_others

CHANNEL = Path("/opt/ml/input/data/train")
CODE = Path(__file__).resolve().parent
# How long the first host waits for every reader (or host) to be ready; one that died never is.
READY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ReaderSlot:
    """One reader of this host: ``name`` (unique across hosts), the rank ``place`` it stands for (as mpirun
    places ranks: hosts in resourceconfig.json's order, ``-map-by slot``), and the plain reader's share,
    every ``count``-th file from the ``index``-th, the share a user would give that rank."""

    name: str
    place: RankPlace
    index: int
    count: int


@dataclass(frozen=True)
class Cluster:
    """This job's hosts in resourceconfig.json's order and this container's host."""

    hosts: tuple[str, ...]
    current: str

    @classmethod
    def read(cls) -> "Cluster":
        resources = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
        return cls(tuple(resources["hosts"]), resources["current_host"])


def reader_name(rank: int) -> str:
    """The name of the reader standing for ``rank``: its lines and its place in the barrier carry it."""
    return str(rank)


def reader_slots(plan: dict, cluster: Cluster) -> list[ReaderSlot]:
    slots, hosts = int(plan["slots"]), len(cluster.hosts)
    first = cluster.hosts.index(cluster.current) * slots
    readers = []
    for slot in range(slots):
        place = RankPlace(rank=first + slot, size=hosts * slots, local_rank=slot, local_size=slots)
        # ShardedByS3Key: this host's files are its own, split between its slots; FullyReplicated: every
        # reader of every host takes its share of all files.
        index, count = (slot, slots) if plan["sharded"] else (place.rank, place.size)
        readers.append(ReaderSlot(reader_name(place.rank), place, index, count))
    return readers


def reader_process(step: str, plan: dict, reader: ReaderSlot, run_dir: RunDir) -> subprocess.Popen[bytes]:
    env = {**os.environ, FOLDER_VAR: plan["start_together"]}
    if step == "plain":
        arguments = [str(CHANNEL), reader.name, str(reader.index), str(reader.count)]
        arguments += [str(plan["batch"]), str(plan["passes"]), json.dumps(plan["image_shape"])]
        command = [sys.executable, str(CODE / "plain_channel_read.py"), *arguments]
        return subprocess.Popen(command, cwd=CODE, env=env)
    if step == "input":
        env.update(reader.place.to_env())
        env[RUN_DIR_VAR] = str(run_dir.root)  # where the host's readers share a listing, as its ranks do
        env[PROBE_LABEL_VAR] = f"impl=input reader={reader.name}"
        command = [sys.executable, str(CODE / "input_path_read.py"), reader.name, str(plan["passes"])]
        return subprocess.Popen(command, cwd=CODE, env=env)
    raise ValueError(f"unknown step {step!r}")


def run_readers(step: str, plan: dict, cluster: Cluster) -> int:
    """1 if any reader failed (or was killed) or not every reader got ready, else 0; waits for every
    reader. The first host lets all hosts' readers of the step start their timed passes together."""
    # The readers share their host's listing as the trainer's ranks do, in an empty folder as the launcher
    # gives them: one of the step's own, not the launcher's, which holds the trainer's listing already.
    with tempfile.TemporaryDirectory(prefix=f"{step}-readers-") as root:
        run_dir = RunDir(Path(root))
        run_dir.listings.mkdir(mode=0o700)
        processes = [reader_process(step, plan, slot, run_dir) for slot in reader_slots(plan, cluster)]
        if cluster.current == cluster.hosts[0] and not all_released(step, plan, cluster):
            for process in processes:
                process.kill()
            for process in processes:
                process.wait()
            return 1
        codes = [process.wait() for process in processes]
    return 1 if any(codes) else 0


def all_released(step: str, plan: dict, cluster: Cluster) -> bool:
    """Whether every host's readers got ready and were let start their timed passes together."""
    names = [reader_name(rank) for rank in range(len(cluster.hosts) * int(plan["slots"]))]
    try:
        release_together(Path(plan["start_together"]), step, names, READY_TIMEOUT_S)
    except TimeoutError as error:
        print(f"channel_job: {error}", file=sys.stderr, flush=True)
        return False
    return True


def every_host_done(step: str, plan: dict, cluster: Cluster) -> None:
    """Return once every host has finished ``step``: a host that went on to its next step early would start
    that step's processes beside the other host's readers still timing theirs."""
    folder, first, others = Path(plan["start_together"]), cluster.hosts[0], cluster.hosts[1:]
    if cluster.current == first:
        release_together(folder, f"{step}-done", others, READY_TIMEOUT_S)
    else:
        wait_for_the_others(folder, f"{step}-done", cluster.current)


def main() -> int:
    plan = json.loads(sys.argv[1])
    cluster = Cluster.read()
    trainer_code = readers_code = 0
    for step in plan["order"]:
        if step == "trainer":
            trainer_code = subprocess.run(["train"], check=False).returncode
            print(f"BENCH trainer_exit code={trainer_code}", flush=True)
        else:
            readers_code = run_readers(step, plan, cluster) or readers_code
        every_host_done(step, plan, cluster)
    return trainer_code or readers_code


if __name__ == "__main__":
    sys.exit(main())
