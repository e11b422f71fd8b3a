"""Bad input: each case ends quickly with one clear sentence in the failure file and exit code 1."""

import pytest

GOOD = {"sagemaker_program": "train.py"}


def remove_resource_config(tree):
    (tree.root / "input" / "config" / "resourceconfig.json").unlink()


CASES = {
    "missing resourceconfig.json": (GOOD, remove_resource_config, "resourceconfig.json is missing"),
    "garbled hyperparameters.json": (
        GOOD,
        lambda t: t.write_config("hyperparameters.json", '{"sagemaker_program": "\\"train.py\\"",'),
        "hyperparameters.json is not valid JSON (line 1, column",
    ),
    "current_host not in hosts": (
        GOOD,
        lambda t: t.write_config(
            "resourceconfig.json", {"current_host": "algo-3", "hosts": ["algo-1", "algo-2"]}
        ),
        "field current_host 'algo-3' is not in hosts ['algo-1', 'algo-2']",
    ),
    "empty hosts": (
        GOOD,
        lambda t: t.write_config("resourceconfig.json", {"current_host": "algo-1", "hosts": []}),
        "field hosts is empty",
    ),
    "integer hyperparameter that is not an integer": (
        {**GOOD, "sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": "two"},
        None,
        "field sagemaker_mpi_num_of_processes_per_host must be an integer >= 1, got 'two'",
    ),
    "custom MPI options with an unbalanced quote": (
        {**GOOD, "sagemaker_mpi_enabled": True, "sagemaker_mpi_custom_mpi_options": '-x FOO="bar'},
        None,
        "field sagemaker_mpi_custom_mpi_options cannot be split into mpirun arguments (No closing "
        "quotation): '-x FOO=\"bar'",
    ),
    "a secret custom MPI option with an unbalanced quote": (
        {
            **GOOD,
            "sagemaker_mpi_enabled": True,
            "sagemaker_mpi_custom_mpi_options": "-x HF_TOKEN='it\"s secret",
        },
        None,
        "(No closing quotation): '-x HF_TOKEN=***'; close the quote",
    ),
    "a setting holding a secret": (
        {**GOOD, "sagetrain_ssh_port": {"password": "it's secret"}},
        None,
        "field sagetrain_ssh_port must be an integer >= 1, got {'password': '***'}",
    ),
    "custom MPI options that set the number of ranks": (
        {**GOOD, "sagemaker_mpi_enabled": True, "sagemaker_mpi_custom_mpi_options": "-np 1"},
        None,
        "field sagemaker_mpi_custom_mpi_options sets -np ('-np 1'), but the launcher decides how many ranks "
        "run on which hosts; remove it and set sagemaker_mpi_num_of_processes_per_host",
    ),
    "missing sagemaker_program": ({"epochs": 2}, None, "hyperparameters.json has no sagemaker_program"),
    "program file absent": (
        {"sagemaker_program": "trian.py"},
        None,
        "sagemaker_program 'trian.py' does not exist: there is no file",
    ),
    "channel declared but folder missing": (
        GOOD,
        lambda t: t.write_config("inputdataconfig.json", {"validation": {"TrainingInputMode": "File"}}),
        "declares channel 'validation' but its folder",
    ),
    "more hyperparameters than the limit": (
        {**GOOD, **{f"hp_{index}": index for index in range(256)}},
        None,
        "hyperparameters.json holds 257 hyperparameters, more than the 256 this image takes (SageMaker takes "
        "100 in a training job",
    ),
    "more channels than the limit": (
        GOOD,
        lambda t: t.write_config(
            "inputdataconfig.json", {f"c{index}": {"TrainingInputMode": "File"} for index in range(101)}
        ),
        "inputdataconfig.json declares 101 channels, more than the 100 this image takes (SageMaker takes 20",
    ),
    "more hosts than the limit": (
        GOOD,
        lambda t: t.write_config(
            "resourceconfig.json",
            {"current_host": "algo-1", "hosts": [f"algo-{index}" for index in range(1, 2050)]},
        ),
        "resourceconfig.json field hosts lists 2,049 hosts, more than the 2,048 this image runs",
    ),
    "a number longer than Python reads, in resourceconfig.json": (
        GOOD,
        lambda t: t.write_config(
            "resourceconfig.json",
            '{"current_host": "algo-1-abcde", "hosts": ["algo-1-abcde"], "x": ' + "1" * 5000 + "}",
        ),
        "resourceconfig.json field 'x' holds a number 5,000 digits long, more than the 4,300 digits Python "
        "reads; no file SageMaker writes holds one: give the value as a string, or a shorter number",
    ),
    "a number longer than Python reads, in inputdataconfig.json": (
        GOOD,
        lambda t: t.write_config("inputdataconfig.json", '{"train": {"n": ' + "1" * 5000 + "}}"),
        "inputdataconfig.json field 'train.n' holds a number 5,000 digits long",
    ),
    "a number longer than Python reads, in hyperparameters.json": (
        GOOD,
        lambda t: t.write_config(
            "hyperparameters.json", '{"sagemaker_program": "\\"train.py\\"", "epochs": ' + "1" * 5000 + "}"
        ),
        "hyperparameters.json field 'epochs' holds a number 5,000 digits long",
    ),
    "a billion processes per host": (
        {**GOOD, "sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 1_000_000_000},
        None,
        "hyperparameter sagemaker_mpi_num_of_processes_per_host is 1000000000, more than 8 processes for "
        "each of this host's",
    ),
    "SMDDP requested": (
        {**GOOD, "sagemaker_distributed_dataparallel_enabled": True},
        None,
        "SMDDP is not in this image; use Horovod (default)",
    ),
}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_fast_with_one_sentence(job, case):
    hyperparameters, spoil, expected = CASES[case]
    tree = job(hyperparameters)
    tree.write_code("train.py", "raise SystemExit('the program must not run')\n")
    if spoil:
        spoil(tree)
    code, output = tree.run()
    assert code == 1, output
    lines = tree.failure.read_text().splitlines()
    assert len(lines) == 1
    assert expected in lines[0]
    assert not lines[0].startswith("Framework Error")
    assert expected in output  # also on stderr, for the job's log
    assert not tree.success.exists()


def million_hyperparameters() -> str:
    """hyperparameters.json with 1,000,000 keys (46 MB), written as SageMaker writes values."""
    entries = (f'"hyperparameter_{index:07d}": "\\"value {index}\\""' for index in range(1_000_000))
    return '{"sagemaker_program": "\\"train.py\\"", ' + ", ".join(entries) + "}"


@pytest.mark.timeout(60)
def test_a_million_hyperparameters_end_with_the_limit_not_an_internal_error(job):
    tree = job(GOOD)
    tree.write_code("train.py", "raise SystemExit('the program must not run')\n")
    tree.write_config("hyperparameters.json", million_hyperparameters())
    code, output = tree.run()
    assert code == 1, output[-2000:]
    failure = tree.failure.read_text()
    first = failure.splitlines()[0]
    assert first.startswith(f"{tree.root}/input/config/hyperparameters.json is ")
    assert "bytes, more than the 4,194,304 bytes (4 MiB) this image reads from a configuration file" in first
    assert "SageMaker takes at most 100 hyperparameters" in first
    assert failure == first + "\n" or failure == first
    assert "Traceback" not in output and "internal error" not in output and "Argument list" not in output
