"""The README's metric_definitions parse the lines the managed trainer prints, as SageMaker would."""

import ast
import re
from pathlib import Path

from sagetrain.contracts import RankPlace
from sagetrain.launch.rank_output import rank_tag
from sagetrain.trainer.epochlog import epoch_line, evaluation_line

README = Path(__file__).resolve().parents[2] / "README.md"
# What the rank launcher puts before rank 0's lines in a job of several processes.
MPI_PREFIX = rank_tag("algo-1", RankPlace(rank=0, size=2))


def metric_definitions() -> dict[str, str]:
    block = re.search(r"METRIC_DEFINITIONS = (\[.*?\n\])", README.read_text(), re.DOTALL)
    assert block, "README has no METRIC_DEFINITIONS block"
    return {entry["Name"]: entry["Regex"] for entry in ast.literal_eval(block.group(1))}


def first_value(regex: str, log: list[str]) -> str | None:
    # SageMaker applies each regex to each log line and keeps the first group of every match.
    values = [m.group(1) for line in log if (m := re.search(regex, line))]
    return values[0] if values else None


def test_each_definition_reads_its_own_value_from_trainer_lines():
    log = [
        MPI_PREFIX
        + epoch_line(
            3, {"loss": 0.1234, "accuracy": 0.91, "val_loss": 0.25, "val_accuracy": 0.875, "auc": 0.5}
        ),
        MPI_PREFIX + evaluation_line({"loss": 0.0001234, "accuracy": 0.9625}),
    ]
    expected = {
        "train:loss": "0.1234",
        "train:accuracy": "0.9100",
        "validation:loss": "0.2500",
        "validation:accuracy": "0.8750",
        "test:loss": "1.2340e-04",
        "test:accuracy": "0.9625",
        "epoch": "3",
    }
    definitions = metric_definitions()
    assert set(definitions) == set(expected)
    for name, regex in definitions.items():
        value = first_value(regex, log)
        assert value == expected[name], (name, regex, value)
        float(value)  # SageMaker must be able to read it as a number


def test_epoch_patterns_do_not_match_the_test_line_and_vice_versa():
    definitions = metric_definitions()
    test_only = [evaluation_line({"loss": 0.5, "accuracy": 0.5})]
    assert first_value(definitions["train:loss"], test_only) is None
    epoch_only = [epoch_line(1, {"loss": 0.5, "accuracy": 0.5})]
    assert first_value(definitions["test:accuracy"], epoch_only) is None
