"""The test command's own machinery: scripts/test.sh runs the suite on pytest-xdist's workers with
``--dist loadgroup``, and the tests that share a resource (this machine's ports, the SDKs' local-mode
network and virtualenvs) rely on their ``xdist_group`` to run one after another on one worker."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

GROUPED_MODULE = """
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("shared")


@pytest.mark.parametrize("index", range(3))
def test_report_worker(index, request):
    place = Path(os.environ["GROUP_TEST_OUT"]) / f"{request.module.__name__}-{index}"
    place.write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path):
    pytest.importorskip("xdist")
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    for name in ("test_first.py", "test_second.py"):
        (suite / name).write_text(GROUPED_MODULE)
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup",
         "--rootdir", str(suite), str(suite)],
        capture_output=True, text=True, timeout=120, check=False, cwd=suite,
        env={**os.environ, "GROUP_TEST_OUT": str(out)},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    workers = {path.name: path.read_text() for path in out.iterdir()}
    # Two modules' three tests each, of one group: one worker ran all six.
    assert len(workers) == 6, workers
    assert len(set(workers.values())) == 1, workers
