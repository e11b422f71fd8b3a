"""The master's join wait (launch/job.py: wait_for_hosts) with events put in by hand."""

import pytest
from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError
from sagetrain.launch.events import EventQueue, HostJoined, HostOutcome, HostReady, RankFailed
from sagetrain.launch.job import JobFailedEarly, wait_for_hosts
from sagetrain.report.verdict import SUCCESS, RankFailure, Verdict

HOSTS = ("algo-2", "algo-3")


def queue_of(*events) -> EventQueue:
    queue = EventQueue()
    for event in events:
        queue.put(event)
    return queue


def test_a_joined_host_whose_program_fails_ends_the_wait_naming_the_failed_rank():
    failure = RankFailure(1, "algo-2", 1, "train.py", message="ValueError: bad shape")
    events = queue_of(
        HostJoined("algo-2", {}),
        RankFailed(failure),
        HostOutcome("algo-2", Verdict(1, "train.py on host algo-2 exited with code 1")),
    )
    # algo-3 never joins: without the outcome the wait would last the whole (long) deadline.
    with pytest.raises(JobFailedEarly) as raised:
        wait_for_hosts(events, HOSTS, until_ready=False, deadline=Deadline(3600, "workers"))
    assert raised.value.verdict == failure.verdict()
    assert raised.value.exit_code == 1


def test_a_failed_outcome_without_rank_report_is_the_verdict_itself():
    outcome = Verdict(2, "the parameter server task on host algo-2 exited with code 2")
    events = queue_of(HostJoined("algo-2", {}), HostOutcome("algo-2", outcome))
    with pytest.raises(JobFailedEarly) as raised:
        wait_for_hosts(events, HOSTS, until_ready=False, deadline=Deadline(3600, "workers"))
    assert raised.value.verdict == outcome


def test_events_that_are_not_about_joining_are_kept_for_the_job_loop_in_order():
    failure = RankFailure(1, "algo-2", 1, "train.py")
    early = [RankFailed(failure), HostOutcome("algo-2", SUCCESS)]
    events = queue_of(HostJoined("algo-2", {"k": 1}), *early, HostJoined("algo-3", {}))
    hellos = wait_for_hosts(events, HOSTS, until_ready=False, deadline=Deadline(60, "workers"))
    assert hellos == {"algo-2": {"k": 1}, "algo-3": {}}
    assert [events.get(Deadline(1, "replay")) for _ in early] == early
    assert events.get(Deadline(0.05, "nothing more")) is None


def test_mpi_waits_for_ready_and_names_the_missing_host_at_the_deadline():
    events = queue_of(HostJoined("algo-2", {}), HostReady("algo-2"), HostJoined("algo-3", {}))
    with pytest.raises(PlatformError, match="still missing: algo-3"):
        wait_for_hosts(events, HOSTS, until_ready=True, deadline=Deadline(0.2, "workers"))
