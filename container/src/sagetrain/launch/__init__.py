"""Doing what the plan says: processes, sshd, the coordinator between hosts, the engines.

``execute`` writes this host's run directory (``run_dir.py``), then runs this host's part of the job on
the plan's engine: the registry (sagetrain/engines.py) names the engine's module, whose ``make_run``
gives the steps that ``lifecycle.run_engine`` runs in their one order.
"""

from __future__ import annotations

from sagetrain.engines import load
from sagetrain.launch.lifecycle import Reports, run_engine
from sagetrain.launch.run_dir import write_run_dir
from sagetrain.launch.spec import JobSpec
from sagetrain.report.verdict import Verdict


def execute(spec: JobSpec, reports: Reports) -> Verdict:
    """Run the job on this host as the plan says; the job's verdict (for a worker: the master's). The
    verdict is reported to ``reports`` as soon as it is decided: before what still runs is stopped, and on
    a master before the other hosts learn it."""
    write_run_dir(spec)
    launcher = load(spec.plan.engine.entry.launcher)
    return run_engine(launcher.make_run(spec), reports, spec.plan.stop)
