"""The SageMaker SDK v3 MPI driver's mpirun as this image runs it: MPI(process_count_per_node=N) means N
ranks on every host; a command that already asks for hosts x N, or that places its ranks itself, runs
as given."""

from __future__ import annotations

import pytest
from sagetrain.sdk.mpirun import CORRECTED, MpirunRequest, corrected, read_request

PYTHON = "/opt/venv/bin/python3"
# mpirun's options and program as sagemaker-train 1.27's mpi_driver.py gives them after --host and -np.
DRIVER_OPTIONS = [
    "--allow-run-as-root", "--tag-output", "-mca", "btl_tcp_if_include", "eth0", "-mca",
    "oob_tcp_if_include", "eth0", "-mca", "plm_rsh_no_tree_spawn", "1", "-mca", "btl", "^openib",
    "-mca", "plm_rsh_num_concurrent", "2", "-x", "NCCL_SOCKET_IFNAME=eth0", "-x", "LD_LIBRARY_PATH",
    "-x", "PATH",
]  # fmt: skip
PROGRAM = [PYTHON, "-m", "mpi4py", "train.py", "--epochs", "2"]


def driver_argv(hosts: str, processes: int, *additional: str) -> list[str]:
    return ["--host", hosts, "-np", str(processes), *DRIVER_OPTIONS, *additional, *PROGRAM]


def test_n_processes_per_node_on_two_hosts_become_n_on_each_host():
    argv, note = corrected(driver_argv("algo-1:2,algo-2:2", 2), {})
    assert argv == driver_argv("algo-1:2,algo-2:2", 4)
    assert note == (
        "MPI(process_count_per_node=2) asks for 2 processes on each host, but the SageMaker SDK's MPI "
        "driver gave mpirun -np 2 for the whole job: running 4, 2 on each of the job's 2 hosts"
    )
    assert note == CORRECTED.format(per_node=2, total=4, hosts=2)


def test_one_process_per_node_names_hosts_without_a_count():
    # The driver leaves ":1" off when the count is 1; Open MPI then gives each host one slot.
    argv, note = corrected(driver_argv("algo-1,algo-2,algo-3", 1), {})
    assert argv == driver_argv("algo-1,algo-2,algo-3", 3)
    assert note is not None


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(driver_argv("algo-1:2,algo-2:2", 4), id="already-hosts-times-n"),
        pytest.param(driver_argv("algo-1:4,algo-2:4", 4, "--map-by", "ppr:2:node"), id="map-by"),
        pytest.param(driver_argv("algo-1:4,algo-2:4", 4, "--map-by=ppr:2:node"), id="map-by-equals"),
        pytest.param(driver_argv("algo-1:2,algo-2:2", 2, "-npernode", "1"), id="npernode"),
        pytest.param(
            driver_argv("algo-1:2,algo-2:2", 2, "-mca", "rmaps_base_mapping_policy", "ppr:1:node"), id="mca"
        ),
        pytest.param(driver_argv("algo-1:2", 2), id="one-host"),
        pytest.param(driver_argv("algo-1:2,algo-2:4", 2), id="unequal-slots"),
        pytest.param(["--host", "algo-1:2,algo-2:2", "-np", "2", "hostname"], id="not-the-driver-program"),
        pytest.param(["--version"], id="no-program"),
    ],
)
def test_other_launches_run_as_given(argv):
    assert corrected(argv, {}) == (argv, None)


def test_a_placement_in_the_environment_is_the_commands_own():
    argv = driver_argv("algo-1:2,algo-2:2", 2)
    assert corrected(argv, {"OMPI_MCA_rmaps_base_mapping_policy": "ppr:1:node"}) == (argv, None)
    assert corrected(argv, {"OMPI_MCA_btl": "^openib"})[1] is not None


def test_the_count_is_corrected_in_its_equals_form_and_program_arguments_are_left_alone():
    argv = ["--host=algo-1:2,algo-2:2", "-np=2", *DRIVER_OPTIONS, *PROGRAM, "-np", "2"]
    fixed, _ = corrected(argv, {})
    assert fixed[:2] == ["--host=algo-1:2,algo-2:2", "-np=4"]
    assert fixed[-2:] == ["-np", "2"]  # the user's own argument, after the program


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (MpirunRequest(slots=(8, 8, 8, 8), processes=8, places_ranks=False), 32),
        (MpirunRequest(slots=(8, 8, 8, 8), processes=32, places_ranks=False), None),
        (MpirunRequest(slots=(8, 8), processes=8, places_ranks=True), None),
        (MpirunRequest(slots=(8,), processes=8, places_ranks=False), None),
    ],
)
def test_the_per_node_count(request_, expected):
    assert request_.per_node_processes() == expected


def test_hosts_that_are_not_host_names_with_counts_are_not_read():
    assert read_request(["--host", "algo-1:two,algo-2:2", "-np", "2"], {}) is None
    assert read_request(["-np", "2"], {}) is None
