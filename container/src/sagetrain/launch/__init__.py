"""Doing what the plan says: processes, sshd, the coordinator between hosts, the engines."""

from __future__ import annotations

from collections.abc import Callable

from sagetrain.launch.job import FinalVerdict, JobSpec
from sagetrain.plan.model import Engine, Role
from sagetrain.report.verdict import Verdict


def execute(spec: JobSpec, python: str, report: Callable[[Verdict], None]) -> Verdict:
    """Run the job on this host as the plan says; the job's verdict (for a worker: the master's).
    ``report`` is called once, as soon as the verdict is final: on a master before the other hosts
    learn it."""
    from sagetrain.launch import mpi, single, tf_distribute

    final = FinalVerdict(report)
    plan = spec.plan
    if plan.engine is Engine.HOROVOD:
        run = mpi.run_mpi_master if plan.role is Role.MASTER else mpi.run_mpi_worker
        return final.settle(run(spec, final))
    if plan.engine.uses_tf_config:
        return final.settle(tf_distribute.run_tf_distribute(spec, python, final))
    return final.settle(single.run_single(spec, final))
