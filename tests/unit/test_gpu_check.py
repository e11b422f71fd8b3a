"""scripts/gpu-check.sh on a machine without a GPU: one line that says so, exit 0, and nothing run (the
PATH it gets has no docker). What it checks on a GPU machine needs one; see its --help."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check.sh"
BASH = shutil.which("bash") or "/bin/bash"


def run(path: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": path, "HOME": os.environ.get("HOME", "/root")},
        check=False,
    )


def test_without_nvidia_smi_it_says_no_gpu_in_one_line_and_exits_0(tmp_path):
    result = run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "gpu-check: no NVIDIA GPU on this machine (no nvidia-smi): nothing checked"
    ]
    assert result.stderr == ""


def test_when_nvidia_smi_lists_no_gpu_it_says_so_in_one_line_and_exits_0(tmp_path):
    # What nvidia-smi does with a driver but no GPU: this message and exit status 6.
    nvidia_smi = tmp_path / "nvidia-smi"
    nvidia_smi.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    nvidia_smi.chmod(0o755)
    grep = shutil.which("grep")
    if grep is None:
        pytest.fail("grep is not on PATH")
    (tmp_path / "grep").symlink_to(grep)
    result = run(str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing checked"
    ]


def test_help_and_bad_arguments():
    shown = run(os.environ["PATH"], "--help")
    assert shown.returncode == 0 and shown.stdout.startswith("Usage: scripts/gpu-check.sh")
    refused = run(os.environ["PATH"], "--epochs", "0")
    assert refused.returncode == 2 and "--epochs must be a positive integer" in refused.stderr


# Step 4's log with NCCL_DEBUG=INFO, in the formats NCCL's INFO lines ("host:pid:tid [device] NCCL INFO …",
# "Using network %s") and aws-ofi-nccl 1.21.1's messages (its source's "NET/OFI " format strings) take,
# then rank 0's BUSBW line.
EFA_LOG = """\
algo-1:812:812 [0] NCCL INFO NCCL version 2.32.3+cuda12.9
algo-1:812:830 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v10)
algo-1:812:830 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.21.1
algo-1:812:830 [0] NCCL INFO NET/OFI Using Libfabric version 1.17
algo-1:812:830 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 4 nics)
algo-1:812:830 [0] NCCL INFO NET/OFI Using transport protocol SENDRECV
algo-1:812:830 [0] NCCL INFO Using network Libfabric
algo-1:813:831 [1] NCCL INFO Using network Libfabric
BUSBW ranks=8 bytes=268435456 seconds=0.0071 sum_ok=True algbw_gbps=37.81 busbw_gbps=66.17
"""
SOCKET_LOG = """\
algo-1:812:812 [0] NCCL INFO NCCL version 2.32.3+cuda12.9
algo-1:812:830 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.
algo-1:812:830 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>
algo-1:812:830 [0] NCCL INFO Using network Socket
BUSBW ranks=4 bytes=268435456 seconds=0.0420 sum_ok=True algbw_gbps=6.39 busbw_gbps=9.59
"""


@pytest.mark.parametrize(
    ("log", "summary"),
    [
        (EFA_LOG, "network=Libfabric plugin=aws-ofi-nccl-1.21.1 provider=efa:4 busbw=66.17"),
        (SOCKET_LOG, "network=Socket plugin=none provider=none busbw=9.59"),
        ("mpirun: the job did not start\n", "network=unknown plugin=none provider=none busbw=none"),
    ],
)
def test_nccl_summary_says_which_network_nccl_used_and_the_bus_bandwidth(tmp_path, log, summary):
    path = tmp_path / "nccl.log"
    path.write_text(log)
    result = run(os.environ["PATH"], "--nccl-summary", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [summary]
