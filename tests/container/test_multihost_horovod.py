"""Horovod over MPI across containers: 2 hosts x 1 rank and 3 hosts x 2 ranks, with a Keras 3 model
module (the managed trainer) and with an ordinary Horovod script. Every host must succeed on its own,
every rank must end with the same weights, and every rank must know the host it runs on."""

import pytest
from cluster import (
    CASES,
    assert_identical_weights,
    exited_on_their_own,
    files_by_host,
    identities,
    run_cluster,
    write_regression_csv,
)

pytestmark = [pytest.mark.container, pytest.mark.timeout(900)]

REPORT_DIR = "/opt/ml/output/data/trainer-report"
SHAPES = [pytest.param(2, 1, id="2hosts-x-1rank"), pytest.param(3, 2, id="3hosts-x-2ranks")]


def program_args(kind, tmp_path):
    """(code, program, hyperparameters, env, weight file pattern) for the two kinds of user code."""
    data = write_regression_csv(tmp_path / "data", rows=240)
    if kind == "module":
        hps = {"epochs": 2, "batch_size": 24, "label_column": "label", "seed": 3}
        env = {"SAGETRAIN_TRAINER_REPORT_DIR": REPORT_DIR}
        return CASES / "keras_module", "model.py", hps, env, "trainer-report/rank-*-weights.npz", data
    hps = {"epochs": 2, "batch_size": 8, "learning_rate": 0.01}
    return CASES / "hvd_script", "train.py", hps, {}, "rank-*-weights.npz", data


@pytest.mark.parametrize("kind", ["module", "script"])
@pytest.mark.parametrize(("hosts", "per_host"), SHAPES)
def test_horovod_job_succeeds_everywhere_with_identical_weights(tmp_path, cpu_image, kind, hosts, per_host):
    code, program, hps, env, weights_pattern, data = program_args(kind, tmp_path)
    hps = {**hps, "sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": per_host}
    result = run_cluster(
        tmp_path, cpu_image, hosts, code, name=f"hvd-{kind}-{hosts}x{per_host}", program=program,
        hyperparameters=hps, channels={"train": data}, env=env, extra=["--grace", "60"], timeout=780,
    )  # fmt: skip
    assert result.exit_code == 0, result.describe()
    assert result.exit_codes() == {f"algo-{i}": 0 for i in range(1, hosts + 1)}, result.describe()
    assert all(exited_on_their_own(result).values()), result.describe()
    for host in result.hosts:
        assert (result.tree(host) / "output" / "success").is_file(), f"{host} wrote no success file"
        assert result.failure(host) is None, f"{host}: {result.failure(host)}"

    size = hosts * per_host
    ranks = identities(result)
    assert sorted(ranks) == list(range(size)), f"identity files for ranks {sorted(ranks)}"
    per_host_count = {host: 0 for host in result.hosts}
    for rank, (tree_host, said) in ranks.items():
        assert said["size"] == size
        # The rank wrote into its own host's tree, and believes it is on that host.
        assert said["sm_current_host"] == tree_host, (rank, said)
        assert said["current_host"] == tree_host, (rank, said)
        assert said["training_env_current_host"] == tree_host, (rank, said)
        # Its container's hostname is the container id (SageMaker local mode): not where identity comes from.
        assert said["hostname"] != tree_host, (rank, said)
        per_host_count[tree_host] += 1
    assert per_host_count == {host: per_host for host in result.hosts}

    weights = [path for paths in files_by_host(result, weights_pattern).values() for path in paths]
    assert len(weights) == size, [str(path) for path in weights]
    assert_identical_weights(weights)
    model_files = sorted(path.name for path in (result.output / "model").iterdir())
    assert "model.keras" in model_files, model_files
