"""The rank launcher's environment rules: own host identity, rank variables, coordinator address."""

import json

from sagetrain.launch.rank import coordinator_address, own_host_variables, rank_variables


def test_rank_variables_from_openmpi():
    env = {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    assert rank_variables(env) == {
        "SAGETRAIN_RANK": "3",
        "SAGETRAIN_LOCAL_RANK": "1",
        "SAGETRAIN_SIZE": "4",
        "SAGETRAIN_LOCAL_SIZE": "2",
    }


def test_rank_variables_without_mpi_keep_the_launchers_or_default():
    assert rank_variables({"SAGETRAIN_RANK": "1", "SAGETRAIN_SIZE": "2"})["SAGETRAIN_RANK"] == "1"
    assert rank_variables({})["SAGETRAIN_SIZE"] == "1"


def test_own_host_replaces_the_masters_identity():
    training_env = {
        "current_host": "algo-1",
        "master_hostname": "algo-1",
        "is_master": True,
        "hosts": ["algo-1", "algo-2"],
    }
    updates = own_host_variables(
        {"SM_CURRENT_HOST": "algo-1", "SM_TRAINING_ENV": json.dumps(training_env)}, "algo-2"
    )
    assert updates["SM_CURRENT_HOST"] == "algo-2"
    assert updates["CURRENT_HOST"] == "algo-2"
    patched = json.loads(updates["SM_TRAINING_ENV"])
    assert (patched["current_host"], patched["is_master"], patched["hosts"]) == (
        "algo-2",
        False,
        ["algo-1", "algo-2"],
    )


def test_coordinator_address_uses_loopback_on_the_master_itself():
    assert coordinator_address("algo-1:7077", "algo-1") == ("127.0.0.1", 7077)
    assert coordinator_address("algo-1:7077", "algo-2") == ("algo-1", 7077)
    assert coordinator_address("", "algo-2") is None
