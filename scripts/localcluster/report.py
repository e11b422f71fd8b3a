"""What the job leaves behind: cluster-summary.json and the final lines printed about every host."""

from __future__ import annotations

from pathlib import Path

from sagetrain.config.job_files import write_json

from localcluster.run import ClusterRun, LogPrinter
from localcluster.spec import HostState, JobResult


def first_failure_line(tree: Path) -> str | None:
    failure = tree / "output" / "failure"
    if not failure.is_file():
        return None
    lines = failure.read_text(errors="replace").strip().splitlines()
    return lines[0] if lines else "(empty failure file)"


def summary_document(result: JobResult, run: ClusterRun, output: Path, workdir: Path | None) -> dict:
    return {
        "job_name": run.spec.job_name,
        "verdict": result.verdict,
        "first_host": result.first_host,
        "reason": result.reason,
        "output": str(output),
        "workdir": None if workdir is None else str(workdir),
        "cleanup_seconds": run.cleanup_seconds,
        "removed_at": run.removed_at,
        "hosts": {
            status.host: {
                "container": status.container,
                "state": status.state.value,
                "exit_code": status.exit_code,
                "started_at": status.started_at,
                "exited_at": status.exited_at,
                "stopped_by_runner": status.stopped_by_runner,
                "failure": first_failure_line(run.trees[status.host]),
            }
            for status in result.hosts
        },
    }


def exit_text(facts: dict) -> str:
    """How a host ended, from its summary facts: ``exit 143``, ``never started``, or ``exit not known``."""
    if facts["exit_code"] is not None:
        return f"exit {facts['exit_code']}"
    # Started, but neither its `docker wait` nor the engine said how it ended.
    return "never started" if facts["state"] == HostState.NEVER_STARTED.value else "exit not known"


def report(
    result: JobResult, run: ClusterRun, output: Path, workdir: Path | None, printer: LogPrinter
) -> None:
    summary = summary_document(result, run, output, workdir)
    write_json(output / "cluster-summary.json", summary)
    for host, facts in summary["hosts"].items():
        code = exit_text(facts)
        stopped = " (stopped by local-cluster)" if facts["stopped_by_runner"] else ""
        failure = f": {facts['failure']}" if facts["failure"] and facts["exit_code"] != 0 else ""
        printer.say(f"{host}: {code}{stopped}{failure}")
    printer.say(f"verdict {result.verdict} ({result.reason}); cleanup took {run.cleanup_seconds:.2f} s")
    model = output / "model"
    has_model = model.is_dir() and any(model.iterdir())
    printer.say(f"model: {model.resolve()}" if has_model else "no model was written to /opt/ml/model")
    printer.say(f"output: {(output / 'output').resolve()}")
    printer.say(f"summary: {(output / 'cluster-summary.json').resolve()}")
    if workdir is not None:
        printer.say(f"host trees kept in {workdir}")
