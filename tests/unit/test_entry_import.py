"""The entry must start fast: importing it pulls in neither TensorFlow nor boto3."""

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "container" / "src"


def test_importing_the_entry_does_not_import_tensorflow_or_boto3():
    code = (
        "import sys; import sagetrain.entry, sagetrain.launch.rank, sagetrain.__main__; "
        "heavy = ('tensorflow', 'boto3', 'sagemaker_training.environment'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
