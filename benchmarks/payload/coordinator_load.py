"""Figure 12: the master's coordinator while N hosts join at once, all on loopback in one container.

    python coordinator_load.py HOSTS        # prints one line: BENCH coordinator {json}

The master process runs the real coordinator of the image's sagetrain, through the package's public surface
(``sagetrain.launch.coordinator``: its ``MasterCoordinator``, with SPAKE2 handshakes and the default
admission limits), and counts its own CPU time, threads and RSS. A second process imports the same
modules, forks one process per worker host (HOSTS - 1) and holds them at a gate; the master opens the
gate and every worker, a real ``WorkerCoordinator``, joins at once: the herd a job's start makes. The
master's host is named by its address (127.0.0.1), which the workers reach it at.

Each worker connects from a loopback address of its own (127.2.x.y): on SageMaker every host has its own
address, and the admission's cap per address (MAX_HANDSHAKES_PER_PEER) would otherwise turn most of a
herd from one address away. The workers count what crosses their sockets (messages are lines). With
more than one CPU, the master runs on the first and the workers on the others, so the master's clock
does not queue behind the workers' own handshakes (on SageMaker each has its own machine).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sagetrain.config.job_secret import Membership
from sagetrain.deadline import Deadline
from sagetrain.launch.coordinator import (
    EventQueue,
    Hello,
    HostChanged,
    HostState,
    JobHosts,
    MasterCoordinator,
    MasterEnded,
    WorkerCoordinator,
)
from sagetrain.report.verdict import SUCCESS
from spake2 import SPAKE2_A, SPAKE2_B

MASTER_ADDRESS = "127.0.0.1"
JOIN_SECONDS = 300.0  # one worker's join, retries included
ALL_SECONDS = 600.0  # the master's wait for every host, and for every worker's end
SAMPLE_SECONDS = 0.005  # how often the master's peak threads and RSS are read while hosts join
CRYPTO_REPEATS = 20  # the master's SPAKE2 alone, for the share of its CPU that is the key exchange


def host_names(hosts: int) -> list[str]:
    """The job's hosts, the master first: named by the address its workers reach it at."""
    return [MASTER_ADDRESS, *(f"algo-{index}" for index in range(2, hosts + 1))]


def job_hosts(names: list[str], current: str, port: int, key: bytes) -> JobHosts:
    return JobHosts(tuple(names), MASTER_ADDRESS, current, port, Membership(key))


def source_address(index: int) -> str:
    """Worker ``index``'s own loopback address (all of 127/8 is this machine's): 127.2.0.1, 127.2.0.2 …"""
    return f"127.2.{index // 250}.{index % 250 + 1}"


@dataclass
class Counts:
    """What crossed one worker's sockets, and how many connections it opened."""

    connections: int = 0
    sent_bytes: int = 0
    received_bytes: int = 0
    sent_messages: int = 0
    received_messages: int = 0


COUNTS = Counts()


class CountingSocket(socket.socket):
    def sendall(self, data: Any, flags: int = 0) -> None:
        COUNTS.sent_bytes += len(data)
        COUNTS.sent_messages += bytes(data).count(b"\n")
        super().sendall(data, flags)

    def recv(self, size: int, flags: int = 0) -> bytes:
        data = super().recv(size, flags)
        COUNTS.received_bytes += len(data)
        COUNTS.received_messages += data.count(b"\n")
        return data


def connector(own_address: str) -> Any:
    """``socket.create_connection`` for one worker: from its own address, through a counting socket."""

    def create_connection(
        address: tuple[str, int], timeout: float | None = None, *_: object
    ) -> socket.socket:
        sock = CountingSocket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((own_address, 0))
            sock.settimeout(timeout)
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        COUNTS.connections += 1
        return sock

    return create_connection


# --- a worker host (a forked process) ---------------------------------------------------------------


def worker(index: int, names: list[str], key: bytes, port: int, gate: int) -> dict[str, Any]:
    host = names[index]
    # This process is one host and nothing else: its sockets come from its own address.
    socket.create_connection = connector(source_address(index))
    os.read(gate, 1)  # held until the master opens the gate (EOF)
    began = time.time()
    events = EventQueue()
    client = WorkerCoordinator(job_hosts(names, host, port, key), events)
    client.join(Hello(), lambda activity: Deadline(JOIN_SECONDS, f"{host} to join the master"))
    joined = time.time()
    client.listen()
    ended = events.get(Deadline(ALL_SECONDS, f"{host} to get the job's verdict"))
    got_verdict = time.time()
    client.close()
    if not isinstance(ended, MasterEnded) or ended.verdict is None:
        raise RuntimeError(f"{host}: no verdict from the master ({ended})")
    return {"host": host, "began": began, "joined": joined, "verdict": got_verdict, **asdict(COUNTS)}


def fork_worker(index: int, names: list[str], key: bytes, port: int, gate: tuple[int, int], out: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    os.close(gate[1])  # or the gate never reads EOF
    code = 0
    try:
        result = worker(index, names, key, port, gate[0])
    except Exception as error:  # whatever went wrong, the master must hear of it
        result, code = {"host": names[index], "error": f"{type(error).__name__}: {error}"}, 1
    os.write(out, (json.dumps(result) + "\n").encode())  # one write under PIPE_BUF: lines never mix
    os._exit(code)


def read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def workers_main(hosts: int, port: int) -> None:
    """The workers' process: fork them, say so, open the gate when told, pass their lines on."""
    key = bytes.fromhex(sys.stdin.readline().strip())
    names = host_names(hosts)
    gate = os.pipe()
    out_read, out_write = os.pipe()
    gc.freeze()  # the forked workers then share the imported modules' pages instead of copying them
    for index in range(1, hosts):
        fork_worker(index, names, key, port, gate, out_write)
    os.close(out_write)
    print("ready", flush=True)
    sys.stdin.readline()
    os.close(gate[1])  # every worker's read returns at once
    lines = read_all(out_read)
    for _ in range(1, hosts):
        os.wait()
    workers_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(lines, end="")
    print(json.dumps({"workers_cpu_seconds": workers_cpu.ru_utime + workers_cpu.ru_stime}), flush=True)


# --- the master -------------------------------------------------------------------------------------


def process_status() -> dict[str, int]:
    """This process's threads and resident memory as the kernel counts them (kB)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("Threads", "VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


class Sampler:
    """The master's peak thread count and RSS while hosts join (its own thread is left out)."""

    def __init__(self) -> None:
        self.peak_threads = 0
        self.peak_rss_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            status = process_status()
            self.peak_threads = max(self.peak_threads, status["Threads"] - 1)
            self.peak_rss_kb = max(self.peak_rss_kb, status["VmRSS"])

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def crypto_seconds(key: bytes) -> float:
    """CPU seconds of the master's side of one SPAKE2 exchange alone (no sockets, no threads): the group
    operations its handshake makes, with the spake2 package the coordinator uses (its key confirmation
    is two HMACs more)."""
    hosts = [f"algo-{index}".encode() for index in range(CRYPTO_REPEATS)]
    starts = [SPAKE2_B(key, idA=b"master", idB=host).start() for host in hosts]
    began = time.process_time()
    for host, start in zip(hosts, starts, strict=True):
        master = SPAKE2_A(key, idA=b"master", idB=host)
        master.start()
        master.finish(start)
    return (time.process_time() - began) / CRYPTO_REPEATS


def wait_joined(events: EventQueue, workers: int) -> list[float]:
    """Monotonic times at which each worker host's JOINED reached the master's queue."""
    deadline = Deadline(ALL_SECONDS, f"{workers} worker hosts to join")
    times: list[float] = []
    while len(times) < workers:
        event = events.get(deadline)
        if event is None:
            raise RuntimeError(deadline.timeout_message(f"{len(times)} joined"))
        if isinstance(event, HostChanged) and event.state is HostState.JOINED:
            times.append(time.monotonic())
    return times


def pin(cpus: set[int]) -> None:
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, cpus)


def start_workers(hosts: int, port: int, key: bytes) -> subprocess.Popen[str]:
    everything = sorted(os.sched_getaffinity(0))
    command = [sys.executable, __file__, "workers", str(hosts), str(port)]
    workers = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if len(everything) > 1:
        os.sched_setaffinity(workers.pid, set(everything[1:]))  # before it forks: children inherit
    assert workers.stdin is not None and workers.stdout is not None
    workers.stdin.write(key.hex() + "\n")
    workers.stdin.flush()
    if workers.stdout.readline().strip() != "ready":
        raise RuntimeError("the workers' process did not start")
    return workers


def start_master(names: list[str], key: bytes) -> tuple[MasterCoordinator, EventQueue, int]:
    events = EventQueue()
    master = MasterCoordinator(job_hosts(names, MASTER_ADDRESS, 0, key), events)
    master.open()
    return master, events, master.port


def open_gate(workers: subprocess.Popen[str]) -> float:
    assert workers.stdin is not None
    opened = time.monotonic()
    workers.stdin.write("go\n")
    workers.stdin.flush()
    return opened


def workers_report(workers: subprocess.Popen[str], still_connected: list[str]) -> list[dict[str, Any]]:
    """Every worker's line and the workers' CPU line; raises when a worker failed."""
    output, _ = workers.communicate(timeout=ALL_SECONDS)
    lines = [json.loads(line) for line in output.splitlines() if line.strip()]
    failed = [line for line in lines if "error" in line]
    if failed or still_connected:
        raise RuntimeError(f"workers failed: {failed[:3]}; still connected: {still_connected[:3]}")
    return lines


def traffic(lines: list[dict[str, Any]]) -> dict[str, Any]:
    per_worker = [line for line in lines if "host" in line]
    joins = [worker["joined"] - worker["began"] for worker in per_worker]
    return {
        "median_join_seconds": statistics.median(joins),
        "max_join_seconds": max(joins),
        "workers_cpu_seconds": sum(line.get("workers_cpu_seconds", 0.0) for line in lines),
        "connections": sum(worker["connections"] for worker in per_worker),
        "messages": sum(worker["sent_messages"] + worker["received_messages"] for worker in per_worker),
        "bytes": sum(worker["sent_bytes"] + worker["received_bytes"] for worker in per_worker),
    }


def master_main(hosts: int) -> dict[str, Any]:
    names = host_names(hosts)
    key = secrets.token_bytes(32)
    master, events, port = start_master(names, key)
    crypto = crypto_seconds(Membership(key).host_key(names[1]))
    pin({min(os.sched_getaffinity(0))})
    workers = start_workers(hosts, port, key)
    before, cpu_before = process_status(), time.process_time()
    with Sampler() as sampler:
        opened = open_gate(workers)
        joined = wait_joined(events, hosts - 1)[-1]
        at_joined, cpu_joined = process_status(), time.process_time()
    still = master.deliver(SUCCESS, None, seconds=ALL_SECONDS)
    disconnected, cpu_end = time.monotonic(), time.process_time()
    return {
        "hosts": hosts,
        "all_joined_seconds": joined - opened,
        "verdict_to_disconnected_seconds": disconnected - joined,
        "master_cpu_join_seconds": cpu_joined - cpu_before,
        "master_cpu_verdict_seconds": cpu_end - cpu_joined,
        "master_spake2_cpu_seconds": crypto,
        "threads_before": before["Threads"],
        "threads_joined": at_joined["Threads"] - 1,  # without the sampler's
        "threads_peak": sampler.peak_threads,
        "rss_kb_before": before["VmRSS"],
        "rss_kb_joined": at_joined["VmRSS"],
        "rss_kb_peak": sampler.peak_rss_kb,
        **traffic(workers_report(workers, still)),
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["workers"]:
        workers_main(int(argv[1]), int(argv[2]))
        return
    print("BENCH coordinator " + json.dumps(master_main(int(argv[0]))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
