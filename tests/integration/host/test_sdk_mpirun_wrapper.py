"""The mpirun this image puts first on the SageMaker SDK v3 MPI driver's PATH, run for real: it comes
first, runs Open MPI's own mpirun, and leaves itself off the PATH the ranks get."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import SRC
from sagetrain.contracts import RUN_DIR_VAR, RunDir
from sagetrain.sdk.mpirun import install


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI (scripts/test.sh installs it)")
def test_the_installed_mpirun_comes_first_on_path_and_runs_the_real_one_without_itself(tmp_path):
    environ = {"PATH": os.environ["PATH"]}
    script = install(environ, RunDir(tmp_path / "run"), python=sys.executable)
    assert environ["PATH"].split(os.pathsep)[0] == str(script.parent)
    assert shutil.which("mpirun", path=environ["PATH"]) == str(script)
    install(environ, RunDir(tmp_path / "run"), python=sys.executable)  # a second start adds nothing
    assert environ["PATH"].split(os.pathsep).count(str(script.parent)) == 1
    shown = subprocess.run(
        [str(script), "-np", "1", sys.executable, "-c", "import os; print(os.environ['PATH'])"],
        env={**os.environ, **environ, RUN_DIR_VAR: str(tmp_path / "run"), "PYTHONPATH": str(SRC),
             "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    # The rank ran under the real mpirun, and the PATH it was given no longer holds the wrapper.
    assert str(script.parent) not in shown.stdout.strip().split(os.pathsep)
    assert shown.stdout.strip()
