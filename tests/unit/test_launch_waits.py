"""The launcher's bounded waits (launch/coordinator/events.py, launch/lifecycle.py, launch/mpi.py), with
events put in by hand and a fake clock: the master's join wait, what explains a failed mpirun, mpirun's
start, the stop path's deadline."""

import pytest
from sagetrain.config.hyperparameters import JobSettings
from sagetrain.config.resources import ResourceConfig
from sagetrain.deadline import Deadline
from sagetrain.engines import Engine
from sagetrain.errors import PlatformError
from sagetrain.launch.coordinator import EventQueue, Hello, HostChanged, HostState, RankReport
from sagetrain.launch.coordinator.events import wait_for_hosts
from sagetrain.launch.lifecycle import JobFailedEarly
from sagetrain.launch.mpi import (
    AFTER_RANKS_STOP_SECONDS,
    MPIRUN_STOP_SECONDS,
    lost_host_behind,
    ranks_not_started,
)
from sagetrain.plan import make_plan
from sagetrain.report.verdict import SUCCESS, RankFailure, Verdict

MPI = (Engine.HOROVOD,)

HOSTS = ("algo-2", "algo-3")


def joined(host, hello):
    return HostChanged(host, HostState.JOINED, hello=hello)


def ready(host):
    return HostChanged(host, HostState.READY)


def outcome(host, verdict):
    return HostChanged(host, HostState.DONE, verdict=verdict)


def lost_host(host, reason):
    return HostChanged(host, HostState.LOST, reason=reason)


def rank_failed(failure):
    return RankReport(failure.rank, failure.host, failure)


def queue_of(*events) -> EventQueue:
    queue = EventQueue()
    for event in events:
        queue.put(event)
    return queue


def test_a_joined_host_whose_program_fails_ends_the_wait_naming_the_failed_rank():
    failure = RankFailure(1, "algo-2", 1, "train.py", message="ValueError: bad shape")
    events = queue_of(
        joined("algo-2", Hello()),
        rank_failed(failure),
        outcome("algo-2", Verdict(1, "train.py on host algo-2 exited with code 1")),
    )
    # algo-3 never joins: without the outcome the wait would last the whole (long) deadline.
    with pytest.raises(JobFailedEarly) as raised:
        wait_for_hosts(events, HOSTS, until_ready=False, deadline=Deadline(3600, "workers"))
    assert raised.value.verdict == failure.verdict()
    assert raised.value.exit_code == 1


def test_a_failed_outcome_without_rank_report_is_the_verdict_itself():
    failed = Verdict(2, "the parameter server task on host algo-2 exited with code 2")
    events = queue_of(joined("algo-2", Hello()), outcome("algo-2", failed))
    with pytest.raises(JobFailedEarly) as raised:
        wait_for_hosts(events, HOSTS, until_ready=False, deadline=Deadline(3600, "workers"))
    assert raised.value.verdict == failed


def test_events_that_are_not_about_joining_are_kept_for_the_job_loop_in_order():
    failure = RankFailure(1, "algo-2", 1, "train.py")
    early = [rank_failed(failure), outcome("algo-2", SUCCESS)]
    events = queue_of(joined("algo-2", Hello(ssh_host_key="k1")), *early, joined("algo-3", Hello()))
    hellos = wait_for_hosts(events, HOSTS, until_ready=False, deadline=Deadline(60, "workers"))
    assert hellos == {"algo-2": Hello(ssh_host_key="k1"), "algo-3": Hello()}
    assert [events.get(Deadline(1, "replay")) for _ in early] == early
    assert events.get(Deadline(0.05, "nothing more")) is None


def test_mpi_waits_for_ready_and_names_the_missing_host_at_the_deadline():
    events = queue_of(joined("algo-2", Hello()), ready("algo-2"), joined("algo-3", Hello()))
    with pytest.raises(PlatformError, match="still missing: algo-3"):
        wait_for_hosts(events, HOSTS, until_ready=True, deadline=Deadline(0.2, "workers"))


KNOCK_ON = RankFailure(0, "algo-1", 143, "train.py")  # stopped by mpirun when algo-2 vanished


def test_a_lost_host_reported_after_the_knock_on_failures_explains_the_failed_mpirun():
    failures = [KNOCK_ON]
    later = RankFailure(2, "algo-1", 1, "train.py", message="Horovod has been shut down. This was caused")
    lost = lost_host("algo-2", "its connection to the coordinator closed")
    events = queue_of(rank_failed(later), lost)
    assert lost_host_behind(events, failures) == lost
    assert failures == [KNOCK_ON, later]


def test_a_rank_that_failed_on_its_own_is_the_explanation_not_a_host():
    own = RankFailure(1, "algo-2", 1, "train.py", message="ValueError: bad batch")
    events = queue_of(rank_failed(own), lost_host("algo-2", "closed"))
    failures = [KNOCK_ON]
    assert lost_host_behind(events, failures) is None
    assert failures == [KNOCK_ON, own]


def test_nothing_more_reported_means_no_lost_host_once_the_short_wait_ends():
    assert lost_host_behind(EventQueue(), [KNOCK_ON]) is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("window", [8.0, 110.0])  # SDK local mode's, SageMaker's (plan/stop.py)
def test_a_part_of_a_deadline_keeps_the_reserve_for_the_steps_after_it(window):
    clock = FakeClock()
    stop = Deadline(window, "the job to stop", clock=clock)
    ranks = stop.part(stop.seconds, "the ranks to end", reserve=AFTER_RANKS_STOP_SECONDS)
    assert ranks.seconds == window - AFTER_RANKS_STOP_SECONDS
    clock.now += ranks.seconds  # the ranks took all their part
    assert ranks.expired() and not stop.expired()
    mpirun = stop.part(MPIRUN_STOP_SECONDS, "mpirun to stop")
    assert mpirun.seconds == MPIRUN_STOP_SECONDS
    clock.now += MPIRUN_STOP_SECONDS
    delivery = stop.part(10.0, "workers to receive the verdict")
    assert delivery.seconds == AFTER_RANKS_STOP_SECONDS - MPIRUN_STOP_SECONDS
    clock.now += 60.0
    assert stop.part(1.0, "the ranks' reports").seconds == 0.0


def mpi_plan(hosts, per_host, custom=(), total=None):
    resources = ResourceConfig(hosts[0], tuple(hosts), "local", "homogeneousCluster", (), "eth0")
    settings = JobSettings(
        enabled_engines=MPI,
        mpi_processes_per_host=per_host,
        mpi_num_processes=total,
        custom_mpi_options=custom,
    )
    return make_plan(resources, settings, gpus_per_host=0)


def test_the_launch_timeout_names_the_ranks_not_started_per_host():
    plan = mpi_plan(("algo-1", "algo-2", "algo-3"), 4)
    assert ranks_not_started(plan, set(range(4)) | {9}) == "algo-2: ranks 4-7; algo-3: ranks [8, 10, 11]"
    assert ranks_not_started(plan, set(range(12)) - {5}) == "algo-2: rank 5"
    assert ranks_not_started(plan, set(range(12))) == ""


def test_fewer_ranks_than_slots_are_named_where_mpirun_places_them():
    plan = mpi_plan(("algo-1", "algo-2", "algo-3"), 4, total=6)
    assert ranks_not_started(plan, {0, 1}) == "algo-1: ranks 2-3; algo-2: ranks 4-5"


def test_ranks_placed_by_the_custom_options_are_named_without_guessing_their_hosts():
    plan = mpi_plan(("algo-1", "algo-2"), 2, custom=("-map-by", "node"))
    assert ranks_not_started(plan, {0, 1}) == "ranks 2-3"
    assert ranks_not_started(plan, {0, 2, 3}) == "rank 1"
    assert ranks_not_started(plan, {0, 1, 2, 3}) == ""
