"""GPUs and CPUs of this host. The counting rule is pure; running nvidia-smi is the edge."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Devices:
    gpus: int
    cpus: int


def _visible_list(value: str | None) -> list[str] | None:
    """None when the variable does not restrict; else the list of visible ids."""
    if value is None:
        return None
    value = value.strip()
    if value in ("all", ""):
        return None if value == "all" else []
    if value in ("none", "void", "-1", "NoDevFiles"):
        return []
    return [v for v in value.split(",") if v.strip()]


def visible_gpu_count(listed: int, nvidia_visible: str | None, cuda_visible: str | None) -> int:
    """How many of the ``listed`` GPUs (nvidia-smi -L) this container's processes may use."""
    count = listed
    for restriction in (_visible_list(nvidia_visible), _visible_list(cuda_visible)):
        if restriction is not None:
            count = min(count, len(restriction))
    return count


def count_listed_gpus(nvidia_smi_output: str) -> int:
    return sum(1 for line in nvidia_smi_output.splitlines() if line.startswith("GPU "))


def detect_devices(environ: Mapping[str, str]) -> Devices:
    try:
        output = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        listed = count_listed_gpus(output)
    except (OSError, subprocess.SubprocessError):
        listed = 0  # no driver or no GPU: a CPU host
    gpus = visible_gpu_count(
        listed, environ.get("NVIDIA_VISIBLE_DEVICES"), environ.get("CUDA_VISIBLE_DEVICES")
    )
    return Devices(gpus=gpus, cpus=os.cpu_count() or 1)
