"""GPUs, CPUs and EFA devices of this host, and the NCCL plugin for EFA in this image. The rules are pure;
running nvidia-smi and reading /sys and /dev are the edge."""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Devices:
    gpus: int
    cpus: int
    driver_version: str | None = None  # the NVIDIA driver's, e.g. "535.104.05"; None without one
    efa_devices: tuple[str, ...] = ()  # EFA RDMA devices this container can open, e.g. ("rdmap16s27",)
    nccl_efa_plugin: str | None = None  # NCCL_EFA_PLUGIN when this image has it (the GPU image), else None


# aws-ofi-nccl, NCCL's network plugin for libfabric, where the GPU image installs it (Dockerfile, stage
# aws-ofi-nccl); the CPU image has none.
NCCL_EFA_PLUGIN = Path("/opt/aws-ofi-nccl/lib/libnccl-net-ofi.so")
# An RDMA device is an EFA when the Linux efa driver drives it; that driver's PCI table (Amazon's vendor
# id with device ids 0xefa0, 0xefa1, …) is the other way to know it.
EFA_DRIVER = "efa"
AMAZON_PCI_VENDOR = "0x1d0f"
EFA_PCI_DEVICE = re.compile(r"0xefa[0-9a-f]")


@dataclass(frozen=True)
class RdmaDevice:
    """An RDMA device as /sys shows it to this container."""

    name: str  # e.g. "rdmap16s27" (/sys/class/infiniband/<name>)
    driver: str | None  # the kernel driver bound to its PCI function, e.g. "efa"
    vendor: str | None  # PCI vendor id, e.g. "0x1d0f"
    device: str | None  # PCI device id, e.g. "0xefa1"
    openable: bool  # its user-space verbs device (/dev/infiniband/uverbsN) is in this container


def is_efa(device: RdmaDevice) -> bool:
    """Whether an RDMA device is an EFA: the efa driver drives it, or it has that driver's PCI ids. Pure."""
    if device.driver == EFA_DRIVER:
        return True
    return device.vendor == AMAZON_PCI_VENDOR and bool(EFA_PCI_DEVICE.fullmatch(device.device or ""))


def usable_efa_devices(devices: tuple[RdmaDevice, ...]) -> tuple[str, ...]:
    """The EFA devices among ``devices`` that this container can open (libfabric's EFA provider opens the
    uverbs device; a host's device that the container was not given is of no use to it). Pure."""
    return tuple(sorted(device.name for device in devices if device.openable and is_efa(device)))


# NVIDIA's minimum driver for CUDA 12 code (CUDA compatibility table, minor-version compatibility).
# TensorFlow 2.21's wheels are CUDA 12, and so are Horovod's own kernels in the GPU image (compiled by
# CUDA 12.4; see container/build-steps/make-cuda-home): one requirement for both.
CUDA_12_MIN_DRIVER = (525, 60, 13)


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


def driver_major(driver_version: str | None) -> int | None:
    """535 of "535.104.05"; None when absent or unreadable."""
    if not driver_version:
        return None
    major = driver_version.strip().split(".", 1)[0]
    return int(major) if major.isdigit() else None


def driver_warnings(devices: Devices, uses_horovod: bool) -> tuple[str, ...]:
    """What the log should say about this host's NVIDIA driver before the job starts. Pure."""
    driver = devices.driver_version
    if devices.gpus == 0 or driver is None or driver_major(driver) is None:
        return ()
    if tuple(int(part) for part in driver.strip().split(".") if part.isdigit()) >= CUDA_12_MIN_DRIVER:
        return ()
    minimum = ".".join(map(str, CUDA_12_MIN_DRIVER))
    affected = "TensorFlow 2.21 will not see the GPUs" + (
        " and Horovod cannot run its GPU kernels" if uses_horovod else ""
    )
    return (
        f"NVIDIA driver {driver} is older than {minimum}, the oldest that runs CUDA 12 "
        f"code: {affected}; use an instance type or AMI with driver >= {minimum}",
    )


def usable_cpus(affinity: int, quota: str | None) -> int:
    """CPUs this container may use: its CPU affinity, lowered by a CFS quota (``docker --cpus``) given as
    cgroup v2's cpu.max text ("150000 100000"; "max 100000" when unlimited). Pure."""
    fields = (quota or "").split()
    if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit() and int(fields[1]) > 0:
        return max(1, min(affinity, math.ceil(int(fields[0]) / int(fields[1]))))
    return max(1, affinity)


def _cpu_quota() -> str | None:
    """cpu.max of cgroup v2, or v1's quota and period in the same form; None when neither is there."""
    v2 = Path("/sys/fs/cgroup/cpu.max")
    v1 = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
    try:
        if v2.is_file():
            return v2.read_text()
        if v1[0].is_file():
            quota = v1[0].read_text().strip()
            return f"{'max' if quota == '-1' else quota} {v1[1].read_text().strip()}"
    except OSError:
        return None
    return None


def _nvidia_smi(*arguments: str) -> str | None:
    try:
        return subprocess.run(
            ["nvidia-smi", *arguments], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None  # no driver or no GPU: a CPU host


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _driver(pci_function: Path) -> str | None:
    """The kernel driver bound to a PCI function: the name its ``driver`` link points to."""
    try:
        return (pci_function / "driver").readlink().name
    except OSError:
        return None


def rdma_devices(sys_root: Path = Path("/sys"), dev_root: Path = Path("/dev")) -> tuple[RdmaDevice, ...]:
    """The RDMA devices /sys lists, each with whether its uverbs device (the one rdma-core's libibverbs
    opens: /sys/class/infiniband_verbs/uverbsN names it in ``ibdev``) is in this container's /dev."""
    openable = {
        ibdev
        for uverbs in sorted((sys_root / "class" / "infiniband_verbs").glob("uverbs*"))
        if (ibdev := _read(uverbs / "ibdev")) and (dev_root / "infiniband" / uverbs.name).exists()
    }
    devices = []
    for entry in sorted((sys_root / "class" / "infiniband").glob("*")):
        pci = entry / "device"
        devices.append(
            RdmaDevice(
                name=entry.name,
                driver=_driver(pci),
                vendor=_read(pci / "vendor"),
                device=_read(pci / "device"),
                openable=entry.name in openable,
            )
        )
    return tuple(devices)


def detect_devices(environ: Mapping[str, str]) -> Devices:
    listing = _nvidia_smi("-L")
    listed = count_listed_gpus(listing) if listing else 0
    gpus = visible_gpu_count(
        listed, environ.get("NVIDIA_VISIBLE_DEVICES"), environ.get("CUDA_VISIBLE_DEVICES")
    )
    driver = _nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader") if listed else None
    driver_version = next((line.strip() for line in (driver or "").splitlines() if line.strip()), None)
    cpus = usable_cpus(len(os.sched_getaffinity(0)), _cpu_quota())
    return Devices(
        gpus=gpus,
        cpus=cpus,
        driver_version=driver_version,
        efa_devices=usable_efa_devices(rdma_devices()),
        nccl_efa_plugin=str(NCCL_EFA_PLUGIN) if NCCL_EFA_PLUGIN.is_file() else None,
    )
