"""The rank launcher (sagetrain-rank) with a real program: signals for the rank reach the program once."""

import os
import subprocess
import sys

import pytest
from conftest import SRC

# Runs the rank launcher; once its program has started (and said it handles SIGTERM), a SIGTERM for the
# rank arrives, as OpenMPI or the entry send it (to the launcher's process group), before the launcher
# has gone on from starting the program.
LAUNCHER_SIGNALLED_AFTER_START = """
import os, signal, sys, threading
from pathlib import Path
from sagetrain.launch import rank
from sagetrain.launch.process import ManagedProcess

ready = Path(sys.argv[1])
start = ManagedProcess.start


def start_then_signal(*args, **kwargs):
    process = start(*args, **kwargs)
    for _ in range(3000):
        if ready.exists():
            break
        threading.Event().wait(0.01)
    os.killpg(0, signal.SIGTERM)
    return process


ManagedProcess.start = start_then_signal
raise SystemExit(rank.run_rank(sys.argv[2:], os.environ))
"""

# Counts the SIGTERMs it gets until the launcher has registered it (which it does after passing on what
# it passes on), then exits with that count.
COUNTS_SIGTERMS = """
import os, signal, sys, threading
from pathlib import Path
received = []
signal.signal(signal.SIGTERM, lambda *_: received.append(1))
Path(sys.argv[1]).touch()
registered = Path(os.environ["SAGETRAIN_RUN_DIR"], "ranks", str(os.getppid()))
for _ in range(3000):
    if registered.exists():
        break
    threading.Event().wait(0.01)
sys.exit(len(received))
"""


@pytest.mark.timeout(60)
def test_a_signal_that_reached_the_program_through_the_group_is_not_passed_on_again(tmp_path):
    ready = tmp_path / "ready"
    program = tmp_path / "program.py"
    program.write_text(COUNTS_SIGTERMS)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SAGETRAIN_", "OMPI_"))},
        "PYTHONPATH": str(SRC),
        "SAGEMAKER_BASE_DIR": str(tmp_path / "ml"),
        "SAGETRAIN_RUN_DIR": str(tmp_path / "run"),
    }
    result = subprocess.run(
        [sys.executable, "-c", LAUNCHER_SIGNALLED_AFTER_START, str(ready), sys.executable, str(program),
         str(ready)],
        env=env, capture_output=True, text=True, timeout=50, start_new_session=True,
    )  # fmt: skip
    assert result.returncode == 1, f"the program got {result.returncode} SIGTERMs\n{result.stderr}"
