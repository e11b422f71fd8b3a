"""Figures 2, 3 and 11: an MPI job of N hosts that does nothing but meet. Prints (wall clock, shared with
the host) when this rank's code starts, when every rank has joined MPI_COMM_WORLD, and when it is about
to exit."""

import socket
import time


def stamp(event: str, **fields: object) -> None:
    extra = " ".join(f"{key}={value}" for key, value in fields.items())
    print(f"BENCH {event}={time.time():.6f} {extra}", flush=True)


stamp("first_line", host=socket.gethostname())

from mpi4py import MPI  # noqa: E402  (after the first stamp: MPI start-up is part of the rendezvous)

world = MPI.COMM_WORLD
world.Barrier()
stamp("all_ranks_running", rank=world.Get_rank(), size=world.Get_size())
world.Barrier()
stamp("rank_exit", rank=world.Get_rank())
