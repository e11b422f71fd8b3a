"""mpirun argument lists: defaults, multi-host ssh and interface pinning, custom options override."""

from pathlib import Path

import pytest
from sagetrain.config.hyperparameters import JobSettings
from sagetrain.config.resources import ResourceConfig
from sagetrain.engines import Engine
from sagetrain.plan import make_plan
from sagetrain.plan.mpi_command import SshSetup, forwarded_env_names, mpirun_command, option_keys

MPI = (Engine.HOROVOD,)

RANK = ["sagetrain-rank", "--", "python", "/opt/ml/code/train.py", "--epochs", "3"]
SSH = SshSetup(Path("/run/sagetrain/ssh/id_ed25519"), Path("/run/sagetrain/ssh/known_hosts"), 22)


def plan(hosts=("algo-1",), custom="", gpus=2):
    resources = ResourceConfig(hosts[0], tuple(hosts), "local", "homogeneousCluster", (), "eth0")
    settings = JobSettings(enabled_engines=MPI, custom_mpi_options=tuple(custom.split()))
    return make_plan(resources, settings, gpus_per_host=gpus)


def test_single_host_line():
    command = mpirun_command(plan(), interface="eth0", env_names=["SM_HPS", "PATH"], rank_argv=RANK, ssh=None)
    assert command == [
        "mpirun",
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--allow-run-as-root",
        "-x",
        "SM_HPS",
        "-x",
        "PATH",
        "-bind-to",
        "none",
        "-map-by",
        "slot",
        *RANK,
    ]


def test_multi_host_line_pins_the_interface_and_uses_our_ssh():
    command = mpirun_command(
        plan(("algo-1", "algo-2")), interface="eth1", env_names=["SM_HPS"], rank_argv=RANK, ssh=SSH
    )
    joined = " ".join(command)
    assert command[:5] == ["mpirun", "-np", "4", "-H", "algo-1:2,algo-2:2"]
    assert "-mca btl_tcp_if_include eth1 -mca oob_tcp_if_include eth1" in joined
    assert "-x NCCL_SOCKET_IFNAME=eth1" in joined
    rsh_args = command[command.index("plm_rsh_args") + 1]
    assert "StrictHostKeyChecking=yes" in rsh_args
    assert "UserKnownHostsFile=/run/sagetrain/ssh/known_hosts" in rsh_args
    assert "-i /run/sagetrain/ssh/id_ed25519" in rsh_args
    assert "-mca plm_rsh_no_tree_spawn 1" in joined
    assert command[-len(RANK) :] == RANK


def test_custom_options_override_our_defaults_and_come_last():
    custom = "-mca btl_tcp_if_include eth9 -x NCCL_SOCKET_IFNAME=eth9 --bind-to core -x NCCL_DEBUG=INFO"
    command = mpirun_command(
        plan(("algo-1", "algo-2"), custom=custom), interface="eth0", env_names=[], rank_argv=RANK, ssh=SSH
    )
    joined = " ".join(command)
    assert "btl_tcp_if_include eth0" not in joined
    assert "NCCL_SOCKET_IFNAME=eth0" not in joined
    assert "-bind-to none" not in joined
    assert "-mca oob_tcp_if_include eth0" in joined  # not overridden
    assert command.count("btl_tcp_if_include") == 1
    tail = command[: -len(RANK)]
    assert tail[-9:] == custom.split()


def test_user_nccl_socket_ifname_in_the_environment_wins():
    command = mpirun_command(
        plan(("algo-1", "algo-2")),
        interface="eth0",
        env_names=["NCCL_SOCKET_IFNAME"],
        rank_argv=RANK,
        ssh=SSH,
    )
    assert "NCCL_SOCKET_IFNAME=eth0" not in command
    assert command.count("NCCL_SOCKET_IFNAME") == 1


@pytest.mark.parametrize(
    ("tokens", "keys"),
    [
        (["-mca", "btl", "tcp,self"], {("mca", "btl")}),
        (["--mca", "btl", "tcp"], {("mca", "btl")}),
        (["-x", "A=1", "-x", "B"], {("x", "A"), ("x", "B")}),
        (["-n", "4", "--host", "a:1"], {("flag", "np"), ("flag", "H")}),
        (
            ["-c", "4", "-machinefile", "f", "-N", "2"],
            {("flag", "np"), ("flag", "hostfile"), ("flag", "npernode")},
        ),
        (["--verbose"], {("flag", "verbose")}),
    ],
)
def test_option_keys(tokens, keys):
    assert option_keys(tokens) == keys


def test_forwarded_env_names_skip_per_process_and_mpi_internal_variables():
    env = {
        "PATH": "",
        "HOSTNAME": "",
        "OMPI_MCA_x": "",
        "PMIX_RANK": "",
        "SM_HPS": "",
        "HOME": "",
        "LD_LIBRARY_PATH": "",
    }
    assert forwarded_env_names(env) == ["LD_LIBRARY_PATH", "PATH", "SM_HPS"]


def test_yield_when_idle_is_a_default_custom_options_can_override():
    resources = ResourceConfig("algo-1", ("algo-1",), "local", "homogeneousCluster", (), "eth0")
    crowded = make_plan(resources, JobSettings(enabled_engines=MPI), gpus_per_host=4, cpus_per_host=4)
    command = mpirun_command(crowded, interface="eth0", env_names=[], rank_argv=RANK, ssh=None)
    assert " -mca mpi_yield_when_idle 1 " in " ".join(command)
    overridden = make_plan(
        resources,
        JobSettings(enabled_engines=MPI, custom_mpi_options=("-mca", "mpi_yield_when_idle", "0")),
        gpus_per_host=4,
        cpus_per_host=4,
    )
    command = mpirun_command(overridden, interface="eth0", env_names=[], rank_argv=RANK, ssh=None)
    assert " ".join(command).count("mpi_yield_when_idle") == 1
    assert " -mca mpi_yield_when_idle 0 " in " ".join(command)
    roomy = make_plan(resources, JobSettings(enabled_engines=MPI), gpus_per_host=4, cpus_per_host=64)
    assert "mpi_yield_when_idle" not in mpirun_command(
        roomy, interface="eth0", env_names=[], rank_argv=RANK, ssh=None
    )
