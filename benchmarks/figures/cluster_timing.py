"""Figures 2, 3 and 11 share their jobs: an MPI job of N hosts (mpi4py, one rank per host) that only
meets and exits, run by our image and by the AWS toolkit image, pairs alternating. From each job:

- rendezvous: the last container's start (Docker's StartedAt) → every rank past an MPI barrier;
- launch, the first part of it: the last container's start → every rank's first line (the launcher's
  work: its handshakes, sshd, mpirun reaching each host; the rest is mpi4py's import and MPI_Init);
- teardown: the last rank's exit stamp → the last container's exit (Docker's FinishedAt);
- containers up, Docker's part before that: `docker start` issued → the last container's StartedAt
  (the engine starts a job's containers one after another).

Every host is left to end on its own: nothing stops a container early.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchlib.cluster import JobFailed, JobRun, JobSpec, run_job
from benchlib.context import PAYLOAD, Context, alternating

HYPERPARAMETERS = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 1}
# A job's own bound: AWS's side sleeps 30 s at its end and, at 32 hosts, imports TensorFlow 32 times.
JOB_SECONDS = 900.0


@dataclass(frozen=True)
class Timing:
    rendezvous: float
    teardown: float
    containers_up: float
    launch: float


def timing_of(job: JobRun) -> Timing:
    first, ready, exits = job.stamps("first_line"), job.stamps("all_ranks_running"), job.stamps("rank_exit")
    hosts = len(job.hosts)
    if not len(first) == len(ready) == len(exits) == hosts:
        tails = "\n".join(host.tail() for host in job.hosts)
        counts = f"{len(first)}, {len(ready)} and {len(exits)}"
        raise JobFailed(f"{job.image}: expected {hosts} ranks' stamps of each kind, got {counts}:\n{tails}")
    return Timing(
        rendezvous=max(ready) - job.last_start,
        teardown=job.last_exit - max(exits),
        containers_up=job.last_start - job.start_issued,
        launch=max(first) - job.last_start,
    )


def _job(ctx: Context, image: str, command: tuple[str, ...], hosts: int) -> Timing:
    spec = JobSpec(
        image=image,
        hosts=hosts,
        code=PAYLOAD,
        program="mpi_probe.py",
        hyperparameters=HYPERPARAMETERS,
        command=command,
        timeout_seconds=JOB_SECONDS,
    )
    return timing_of(run_job(ctx.created, spec, ctx.workdir).require_success())


def paired_timings(ctx: Context, hosts: int = 2, runs: int | None = None) -> list[tuple[Timing, Timing]]:
    """(ours, aws) per run at ``hosts`` hosts (``runs`` pairs, default the context's); measured once
    even when several figures ask for them."""
    count = ctx.runs if runs is None else runs

    def measure() -> list[tuple[Timing, Timing]]:
        sides = {"ours": (ctx.image, ("train",)), "aws": (ctx.aws_image(), ())}
        pairs = []
        for index, ours_first in alternating(count):
            order = ["ours", "aws"] if ours_first else ["aws", "ours"]
            measured = {side: _job(ctx, *sides[side], hosts) for side in order}
            ours, aws = measured["ours"], measured["aws"]
            ctx.say(
                f"[{hosts} hosts] run {index + 1}/{count}: rendezvous ours {ours.rendezvous:.2f} s / aws "
                f"{aws.rendezvous:.2f} s; teardown ours {ours.teardown:.2f} s / aws {aws.teardown:.2f} s; "
                f"containers up {ours.containers_up:.2f} s / {aws.containers_up:.2f} s; "
                f"launch {ours.launch:.2f} s / {aws.launch:.2f} s"
            )
            pairs.append((ours, aws))
        return pairs

    return ctx.once(f"cluster_timing {hosts} hosts, {count} runs", measure)
