"""Doing what the plan says: processes, sshd, the coordinator between hosts, the engines."""

from __future__ import annotations

from sagetrain.launch.job import JobSpec
from sagetrain.plan.model import Engine, Role
from sagetrain.report.verdict import Verdict


def execute(spec: JobSpec, python: str) -> Verdict:
    """Run the job on this host as the plan says; the job's verdict (for a worker: the master's)."""
    from sagetrain.launch import mpi, single, tf_distribute

    plan = spec.plan
    if plan.engine is Engine.HOROVOD:
        return mpi.run_mpi_master(spec) if plan.role is Role.MASTER else mpi.run_mpi_worker(spec)
    if plan.engine.uses_tf_config:
        return tf_distribute.run_tf_distribute(spec, python)
    return single.run_single(spec)
