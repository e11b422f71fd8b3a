"""Inside one container of our image on a network of its own: what the members-only library adds to one
accept() (the image preloads it into every process of a job; it touches nothing else of a connection).

One process, one listening socket, two functions called through ctypes on the same waiting connections,
batch by batch in alternating order: the C library's accept() (theirs) and the library's (ours: which
takes the connection with the C library's accept() and then checks its peer). For each batch, BATCH
connections are made first and wait in the listen queue, so only accepting is timed (each accepted
connection is closed outside the timed part). Connections come from this container's own network address
(not loopback), which the members file lists last of MEMBERS addresses, so the library checks the file
(one stat) and walks the whole list; a second series comes over loopback, which the library passes
without a look at the file. Prints ``BENCH accept {json}``: nanoseconds per accept for each function
and path, the quietest batch's (``ns_per_accept``: on a shared machine a batch is only ever slowed, by the
other processes, so the fastest is the nearest to what accepting costs) and the median batch's.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

LIBRARY = "/usr/local/lib/sagetrain/libsagetrain-members-only.so"
RUN_DIR_VAR = "SAGETRAIN_RUN_DIR"
BATCH = 500
BATCHES = 40
MEMBERS = 256

Accept = Callable[[int, None, None], int]


def own_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((socket.gethostname(), 9))  # sends nothing: which local address routes there
        return probe.getsockname()[0]


def timed_batch(listener: socket.socket, accept: Accept, close: Callable[[int], int], address: str) -> float:
    """Nanoseconds per accept of BATCH connections from ``address``, all waiting before the first."""
    port = listener.getsockname()[1]
    clients = [socket.create_connection((address, port)) for _ in range(BATCH)]
    accepted = []
    started = time.perf_counter_ns()
    for _ in range(BATCH):
        accepted.append(accept(listener.fileno(), None, None))
    spent = time.perf_counter_ns() - started
    if min(accepted) < 0:
        raise OSError(ctypes.get_errno(), "accept failed")
    for connection in accepted:
        close(connection)
    for client in clients:
        client.close()
    return spent / BATCH


def main() -> None:
    address = own_address()
    run_dir = Path(tempfile.mkdtemp())
    others = [f"10.{i // 250}.{i % 250}.7" for i in range(MEMBERS - 1)]
    (run_dir / "members").write_text("".join(f"{member}\n" for member in [*others, address]))
    os.environ[RUN_DIR_VAR] = str(run_dir)
    libc = ctypes.CDLL(None, use_errno=True)
    functions = {"theirs": libc.accept, "ours": ctypes.CDLL(LIBRARY, use_errno=True).accept}
    listener = socket.create_server(("0.0.0.0", 0), backlog=2 * BATCH)
    peers = {"member": address, "loopback": "127.0.0.1"}
    samples: dict[str, list[float]] = {f"{name} {path}": [] for name in functions for path in peers}
    for batch in range(BATCHES):
        order = list(functions) if batch % 2 == 0 else list(reversed(functions))
        for name in order:
            for path, peer in peers.items():
                samples[f"{name} {path}"].append(timed_batch(listener, functions[name], libc.close, peer))
    result = {
        "ns_per_accept": {name: min(values) for name, values in samples.items()},
        "median_ns_per_accept": {name: statistics.median(values) for name, values in samples.items()},
        "members": MEMBERS,
        "batch": BATCH,
    }
    print("BENCH accept " + json.dumps(result))


if __name__ == "__main__":
    main()
