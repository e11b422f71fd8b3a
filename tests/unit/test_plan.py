"""Every planning branch, with literals."""

import pytest
from sagetrain.config.hyperparameters import JobSettings, LaunchSettings
from sagetrain.config.resources import InstanceGroup, ResourceConfig
from sagetrain.errors import UserError
from sagetrain.plan import Engine, Role, make_plan

MPI = (Engine.HOROVOD,)
MWMS = (Engine.MULTI_WORKER_MIRRORED,)
PS = (Engine.PARAMETER_SERVER,)


def resources(hosts=("algo-1",), current=None, groups=(), interface=None):
    return ResourceConfig(
        current_host=current or hosts[0],
        hosts=tuple(hosts),
        current_instance_type="ml.p4d.24xlarge",
        current_group_name="homogeneousCluster",
        instance_groups=tuple(groups),
        network_interface_name=interface,
    )


TWO = ("algo-1-x1y2z", "algo-2-x1y2z")


def test_one_host_no_gpu_is_a_single_process():
    plan = make_plan(resources(), JobSettings(), gpus_per_host=0)
    assert (plan.engine, plan.total_processes, plan.role) == (Engine.SINGLE, 1, Role.MASTER)


def test_one_host_one_gpu_is_a_single_process():
    assert make_plan(resources(), JobSettings(), gpus_per_host=1).engine is Engine.SINGLE


def test_auto_one_host_eight_gpus_is_horovod_with_a_rank_per_gpu():
    plan = make_plan(resources(), JobSettings(), gpus_per_host=8)
    assert (plan.engine, plan.processes_per_host, plan.total_processes) == (Engine.HOROVOD, 8, 8)
    assert plan.reasons[0].startswith("auto")


def test_auto_two_cpu_hosts_is_horovod_with_one_rank_per_host():
    plan = make_plan(resources(TWO), JobSettings(), gpus_per_host=0)
    assert (plan.engine, plan.processes_per_host, plan.total_processes) == (Engine.HOROVOD, 1, 2)
    assert plan.master == "algo-1-x1y2z"


def test_master_is_first_host_and_roles_follow():
    worker = make_plan(resources(TWO, current="algo-2-x1y2z"), JobSettings(), gpus_per_host=4)
    assert worker.master == "algo-1-x1y2z"
    assert worker.role is Role.WORKER
    assert worker.total_processes == 8
    assert worker.processes_on("algo-2-x1y2z") == 4


def test_mpi_enabled_with_processes_per_host():
    settings = JobSettings(enabled_engines=MPI, mpi_processes_per_host=2)
    plan = make_plan(resources(), settings, gpus_per_host=0)
    assert (plan.engine, plan.total_processes, plan.reasons) == (
        Engine.HOROVOD,
        2,
        ("sagemaker_mpi_enabled is set",),
    )


@pytest.mark.parametrize(("gpus", "cpus", "most"), [(0, 2, 16), (8, 96, 768), (8, 4, 64)])
def test_processes_per_host_are_bounded_by_eight_per_cpu_or_gpu(gpus, cpus, most):
    at_most = JobSettings(enabled_engines=MPI, mpi_processes_per_host=most)
    assert make_plan(resources(), at_most, gpus, cpus).processes_per_host == most
    over = JobSettings(enabled_engines=MPI, mpi_processes_per_host=1_000_000_000)
    with pytest.raises(UserError) as error:
        make_plan(resources(), over, gpus, cpus)
    assert error.value.cause == (
        f"hyperparameter sagemaker_mpi_num_of_processes_per_host is 1000000000, more than 8 processes for "
        f"each of this host's {cpus} CPUs and {gpus} GPUs ({most} at most); lower it: one rank per GPU, or "
        "per CPU core on a CPU instance, is usual"
    )
    # Without MPI enabled the count still decides the ranks (auto: Horovod): bounded the same way.
    with pytest.raises(UserError, match="sagemaker_mpi_num_of_processes_per_host is 1000000000"):
        make_plan(resources(), JobSettings(mpi_processes_per_host=1_000_000_000), gpus, cpus)


def test_processes_per_host_are_not_bounded_when_the_hosts_cpus_are_not_known():
    settings = JobSettings(enabled_engines=MPI, mpi_processes_per_host=1000)
    assert make_plan(resources(), settings, gpus_per_host=0).processes_per_host == 1000


def test_mpi_num_processes_fewer_than_slots():
    plan = make_plan(resources(TWO), JobSettings(enabled_engines=MPI, mpi_num_processes=3), gpus_per_host=2)
    assert (plan.total_processes, plan.processes_on(TWO[0]), plan.processes_on(TWO[1])) == (3, 2, 1)
    assert (plan.ranks_on(TWO[0]), plan.ranks_on(TWO[1]), plan.ranks_on("algo-9")) == (
        range(0, 2),
        range(2, 3),
        range(0),
    )
    single_rank = make_plan(resources(TWO), JobSettings(enabled_engines=MPI, mpi_num_processes=1), 2)
    assert list(single_rank.ranks_on(TWO[1])) == [] and single_rank.processes_on(TWO[1]) == 0


def test_mpi_num_processes_more_than_slots_is_refused():
    with pytest.raises(UserError, match="sagemaker_mpi_num_processes is 5"):
        make_plan(
            resources(TWO),
            JobSettings(enabled_engines=MPI, mpi_num_processes=5),
            gpus_per_host=2,
        )


def test_multi_worker_mirrored_is_one_process_per_host():
    plan = make_plan(resources(TWO), JobSettings(enabled_engines=MWMS), gpus_per_host=8)
    assert (plan.engine, plan.processes_per_host, plan.total_processes) == (
        Engine.MULTI_WORKER_MIRRORED,
        1,
        2,
    )


def test_parameter_server_on_two_hosts():
    plan = make_plan(resources(TWO), JobSettings(enabled_engines=PS), gpus_per_host=0)
    assert (plan.engine, plan.total_processes) == (Engine.PARAMETER_SERVER, 2)


def test_the_legacy_keras_switch_by_hyperparameter_or_environment():
    by_hyperparameter = JobSettings(launch=LaunchSettings(legacy_keras=True))
    assert make_plan(resources(TWO), by_hyperparameter, gpus_per_host=0).legacy_keras
    assert make_plan(resources(TWO), JobSettings(), gpus_per_host=0, legacy_keras_env=True).legacy_keras


def test_the_legacy_keras_switch_is_off_unless_asked_for():
    assert not make_plan(resources(TWO), JobSettings(), gpus_per_host=0).legacy_keras


def test_parameter_server_on_one_host_runs_a_single_process():
    plan = make_plan(resources(), JobSettings(enabled_engines=PS), gpus_per_host=0)
    assert plan.engine is Engine.SINGLE


def test_two_engines_named_is_refused():
    with pytest.raises(UserError, match="more than one distribution engine"):
        make_plan(
            resources(),
            JobSettings(enabled_engines=(Engine.HOROVOD, Engine.PARAMETER_SERVER)),
            gpus_per_host=0,
        )


def test_smddp_is_refused_with_the_advice():
    with pytest.raises(UserError, match=r"SMDDP is not in this image; use Horovod \(default\)"):
        make_plan(resources(), JobSettings(smddp_enabled=True), gpus_per_host=8)


def test_interface_precedence():
    assert make_plan(resources(interface="ethwe"), JobSettings(), 0).interface == "ethwe"
    assert (
        make_plan(resources(interface="ethwe"), JobSettings(network_interface_name="eth1"), 0).interface
        == "eth1"
    )
    assert make_plan(resources(), JobSettings(), 0).interface == "eth0"


HETERO_HOSTS = ("algo-1", "algo-2", "algo-3")
HETERO_GROUPS = (
    InstanceGroup("data", "ml.c5.xlarge", ("algo-1",)),
    InstanceGroup("gpus", "ml.p4d.24xlarge", ("algo-2", "algo-3")),
)


def test_instance_groups_only_the_distribution_group_trains():
    settings = JobSettings(enabled_engines=MPI, distribution_instance_groups=("gpus",))
    plan = make_plan(
        resources(HETERO_HOSTS, current="algo-3", groups=HETERO_GROUPS), settings, gpus_per_host=8
    )
    assert plan.hosts == ("algo-2", "algo-3")
    assert plan.master == "algo-2"
    assert (plan.role, plan.total_processes) == (Role.WORKER, 16)


def test_host_outside_the_distribution_group_runs_alone():
    settings = JobSettings(enabled_engines=MPI, distribution_instance_groups=("gpus",))
    plan = make_plan(
        resources(HETERO_HOSTS, current="algo-1", groups=HETERO_GROUPS), settings, gpus_per_host=0
    )
    assert (plan.engine, plan.role, plan.hosts) == (Engine.SINGLE, Role.STANDALONE, ("algo-1",))


def test_unknown_distribution_group_is_refused():
    settings = JobSettings(enabled_engines=MPI, distribution_instance_groups=("tpus",))
    with pytest.raises(UserError, match="instance group 'tpus'"):
        make_plan(resources(HETERO_HOSTS, groups=HETERO_GROUPS), settings, gpus_per_host=0)


def test_custom_mpi_options_reach_the_plan_as_arguments():
    options = ("-x", "A=b c", "--verbose")
    plan = make_plan(resources(), JobSettings(enabled_engines=MPI, custom_mpi_options=options), 2)
    assert plan.custom_mpi_options == options


def test_mpi_yields_when_idle_only_when_ranks_fill_the_cpus():
    settings = JobSettings(enabled_engines=MPI, mpi_processes_per_host=2)
    crowded = make_plan(resources(TWO), settings, gpus_per_host=0, cpus_per_host=2)
    roomy = make_plan(resources(TWO), settings, gpus_per_host=0, cpus_per_host=8)
    unknown = make_plan(resources(TWO), settings, gpus_per_host=0)
    assert (crowded.mpi_yield_when_idle, roomy.mpi_yield_when_idle, unknown.mpi_yield_when_idle) == (
        True,
        False,
        False,
    )
    assert any("yields when idle" in reason for reason in crowded.reasons)
    mwms = make_plan(resources(TWO), JobSettings(enabled_engines=MWMS), 0, cpus_per_host=1)
    assert not mwms.mpi_yield_when_idle
