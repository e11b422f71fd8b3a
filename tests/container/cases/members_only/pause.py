"""Where the test probes the job's ports: the program stops at a FIFO in its host's output folder, says
so, and goes on once the test has written to it (each process its own FIFO; nothing else to wait on)."""

import os
from pathlib import Path


def pause_here(name: str) -> None:
    folder = Path(os.environ["SM_OUTPUT_DATA_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    fifo = folder / f"pause-{name}"
    os.mkfifo(fifo)
    print(f"paused at {fifo}", flush=True)
    with fifo.open(encoding="utf-8") as released:  # blocks until the test opens it for writing
        released.read()
    fifo.unlink()
    print(f"released {name}", flush=True)
