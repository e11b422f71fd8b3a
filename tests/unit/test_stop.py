"""Stopping: the window each platform gives after SIGTERM, the report written at once and replaced, and
the stopped job's sentence (the lowest rank that said something, else what was saved after the signal)."""

import os

import pytest
from sagetrain.config.paths import Paths
from sagetrain.deadline import Deadline
from sagetrain.errors import Terminated
from sagetrain.launch.coordinator import EventQueue, RankReport
from sagetrain.launch.lifecycle import stopped_verdict, stopping_verdict
from sagetrain.plan.stop import stop_window
from sagetrain.redact import RedactingFilter
from sagetrain.report.job_end import JobEnd
from sagetrain.report.saved_files import CheckpointFolder, files_written_since
from sagetrain.report.verdict import RankFailure, Verdict

SETTING = "sagetrain_stop_seconds"


@pytest.mark.parametrize(
    ("configured", "instance_type", "seconds", "reason"),
    [
        (None, "ml.p4d.24xlarge", 110.0, "SageMaker sends SIGKILL 120 s after SIGTERM"),
        (None, "ml.c5.xlarge", 110.0, "SageMaker sends SIGKILL 120 s after SIGTERM"),
        (None, "local", 8.0, "instance type 'local' is the SageMaker SDK's local mode"),
        (None, "local_gpu", 8.0, "instance type 'local_gpu' is the SageMaker SDK's local mode"),
        (None, "local_cpu", 8.0, "instance type 'local_cpu' is the SageMaker SDK's local mode"),
        (45.0, "local", 45.0, "sagetrain_stop_seconds is 45"),
        (30.0, "ml.c5.xlarge", 30.0, "sagetrain_stop_seconds is 30"),
    ],
)
def test_the_stop_window_is_the_platforms_less_a_margin_or_the_setting(
    configured, instance_type, seconds, reason
):
    window = stop_window(configured, instance_type, SETTING)
    assert window.seconds == seconds
    assert window.reason.startswith(reason)


STOPPED = Terminated("the job was stopped by SIGTERM (the container was asked to stop)", signalled_at=1000.0)


def failure(rank: int, message: str) -> RankFailure:
    return RankFailure(rank, f"algo-{rank + 1}", 143, "model.py", message=message)


def test_the_lowest_rank_that_said_something_is_quoted_whichever_came_first(tmp_path):
    events = EventQueue()
    events.put(RankReport(0, "algo-1", failure(0, "rank 0 (host algo-1) wrote the checkpoint c.npz")))
    verdict = stopped_verdict(
        STOPPED, events, [failure(1, "rank 0 (host algo-1) wrote the checkpoint c.npz")],
        Deadline(5.0, "stop"), CheckpointFolder(tmp_path, "algo-1"),
    )  # fmt: skip
    assert verdict == Verdict(
        143,
        "the job was stopped by SIGTERM (the container was asked to stop); rank 0 (host algo-1) wrote "
        "the checkpoint c.npz",
    )
    events.put(RankReport(1, "algo-2", failure(1, "saving")))
    verdict = stopped_verdict(
        STOPPED, events, [], Deadline(5.0, "stop"), CheckpointFolder(tmp_path, "algo-1")
    )
    assert verdict.cause.endswith("; rank 1 (host algo-2): saving")  # what a rank says of itself is named


def test_without_a_rank_saying_anything_the_files_written_after_the_signal_are_named(tmp_path):
    (tmp_path / "old.keras").write_text("before")
    os.utime(tmp_path / "old.keras", (900.0, 900.0))
    (tmp_path / "run").mkdir()
    for name, at in (("ckpt-3.keras", 1010.0), ("ckpt-3.json", 1005.0), ("ckpt-2.keras", 1001.0)):
        (tmp_path / "run" / name).write_text("after")
        os.utime(tmp_path / "run" / name, (at, at))
    verdict = stopped_verdict(
        STOPPED, EventQueue(), [], Deadline(0.0, "stop"), CheckpointFolder(tmp_path, "algo-1")
    )
    assert verdict.cause == (
        "the job was stopped by SIGTERM (the container was asked to stop); after it, the program wrote "
        f"{tmp_path}/run/ckpt-3.keras and 2 other files on host algo-1"
    )
    saved = files_written_since(tmp_path, 1010.0)
    assert saved is not None and (saved.newest.name, saved.count) == ("ckpt-3.keras", 1)


def test_a_stop_that_saved_nothing_is_our_sentence_alone(tmp_path):
    verdict = stopped_verdict(
        STOPPED, EventQueue(), [], Deadline(0.0, "stop"), CheckpointFolder(tmp_path / "none", "algo-1")
    )
    assert verdict.cause == "the job was stopped by SIGTERM (the container was asked to stop)"


def test_the_report_is_written_at_the_signal_and_replaced_by_the_final_one(tmp_path):
    paths = Paths(tmp_path)
    end = JobEnd(paths, RedactingFilter())
    window = stop_window(None, "ml.c5.xlarge", SETTING)
    end.provisional(stopping_verdict(STOPPED, window))
    assert paths.failure_file.read_text().splitlines()[0] == (
        "the job was stopped by SIGTERM (the container was asked to stop); the programs had up to 110 s to "
        "save their work and end (SageMaker sends SIGKILL 120 s after SIGTERM), and the container was killed "
        "before they did"
    )
    end.report(Verdict(143, "the job was stopped by SIGTERM; rank 0 (host algo-1): saved"))
    assert paths.failure_file.read_text() == "the job was stopped by SIGTERM; rank 0 (host algo-1): saved\n"
    end.provisional(stopping_verdict(STOPPED, window))  # the verdict is final: nothing replaces it
    assert paths.failure_file.read_text() == "the job was stopped by SIGTERM; rank 0 (host algo-1): saved\n"
