"""Doing what the plan says: processes, sshd, the coordinator between hosts, the engines."""

from __future__ import annotations

from sagetrain.launch.job import JobSpec, Report
from sagetrain.plan.model import Engine, Role
from sagetrain.report.verdict import Verdict


def execute(spec: JobSpec, python: str, report: Report) -> Verdict:
    """Run the job on this host as the plan says; the job's verdict (for a worker: the master's). The
    engine calls ``report`` as soon as it has decided: before it stops what still runs, and on a master
    before the other hosts learn the verdict."""
    from sagetrain.launch import mpi, single, tf_distribute

    plan = spec.plan
    if plan.engine is Engine.HOROVOD:
        run = mpi.run_mpi_master if plan.role is Role.MASTER else mpi.run_mpi_worker
        return run(spec, report)
    if plan.engine.uses_tf_config:
        return tf_distribute.run_tf_distribute(spec, python, report)
    return single.run_single(spec, report)
