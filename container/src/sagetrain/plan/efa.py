"""What NCCL and libfabric are told on a host with EFA: a pure decision from what the host has (its EFA
devices, GPUs, instance type, and whether the image has the NCCL plugin). Without an EFA device nothing
is set, and NCCL keeps its own transports (sockets between hosts).

The GPU image's aws-ofi-nccl is built without its AWS platform code, which needs libfabric >= 1.22 where
Debian's is 1.17 (container/build-steps/build-aws-ofi-nccl). On EC2 that code picks libfabric's EFA
provider, forces NCCL's Simple protocol where EFA does not deliver bytes in order, and sets
FI_EFA_FORK_SAFE (so aws-ofi-nccl 1.21.1's source does); the same settings are made here instead.
FI_EFA_USE_DEVICE_RDMA=1 is what libfabric < 1.18 needs on instances whose EFA does RDMA read (the
plugin's own EFA notes), and libfabric aborts the process when it is set on an EFA that does not, so it is
set only for the instance types the plugin's platform table marks as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NCCL_NET_PLUGIN_VAR = "NCCL_NET_PLUGIN"  # which network plugin NCCL loads: here, a path to it
NCCL_PROTO_VAR = "NCCL_PROTO"
FI_PROVIDER_VAR = "FI_PROVIDER"
FI_EFA_FORK_SAFE_VAR = "FI_EFA_FORK_SAFE"
FI_EFA_USE_DEVICE_RDMA_VAR = "FI_EFA_USE_DEVICE_RDMA"

EFA_PROVIDER = "efa"
# NCCL's LL and LL128 protocols rely on the network delivering each 128-byte line in order; EFA's SRD
# transport does not promise it, so only Simple is safe.
SIMPLE_PROTOCOL = "simple"

SAGEMAKER_INSTANCE_PREFIX = "ml."
# Instance types whose EFA does RDMA read, from aws-ofi-nccl 1.21.1's platform table (those it requires
# GPUDirect RDMA on): p4d and p4de, every P instance of generation 5 or later except p5.4xlarge, and
# g7e.12/24/48xlarge. Others (p3dn, g5, g6, p5.4xlarge…) have EFA without RDMA read.
DEVICE_RDMA_INSTANCE_TYPES = re.compile(
    r"p4de?\.24xlarge|p(?:[5-9]|[0-9]{2,})[a-z0-9-]*\.[a-z0-9]+|g7e\.(?:12|24|48)xlarge"
)
NO_DEVICE_RDMA_INSTANCE_TYPES = frozenset({"p5.4xlarge"})


@dataclass(frozen=True)
class EfaSettings:
    env: tuple[tuple[str, str], ...] = ()  # what the job's environment gets, unless the user set it
    reason: str | None = None  # for the plan's reasons (the log and the dry run); None without EFA


def has_device_rdma(instance_type: str) -> bool:
    """Whether the EFA of ``instance_type`` ("ml.p4d.24xlarge" or "p4d.24xlarge") does RDMA read. Pure."""
    bare = instance_type.removeprefix(SAGEMAKER_INSTANCE_PREFIX)
    return bare not in NO_DEVICE_RDMA_INSTANCE_TYPES and bool(DEVICE_RDMA_INSTANCE_TYPES.fullmatch(bare))


def efa_settings(
    efa_devices: tuple[str, ...], gpus: int, instance_type: str, nccl_plugin: str | None
) -> EfaSettings:
    """The EFA settings of a host with ``efa_devices`` (those this container can open), ``gpus`` GPUs,
    of ``instance_type``, with the NCCL plugin at ``nccl_plugin`` (None: the image has none). Pure."""
    if not efa_devices:
        return EfaSettings()
    devices = f"{len(efa_devices)} EFA device(s) ({', '.join(efa_devices)})"
    if gpus == 0:
        return EfaSettings(reason=f"{devices} but no GPU: NCCL does not run here, nothing set for EFA")
    if nccl_plugin is None:
        return EfaSettings(reason=f"{devices} but this image has no NCCL plugin for EFA: NCCL uses sockets")
    env = [
        (NCCL_NET_PLUGIN_VAR, nccl_plugin),
        (FI_PROVIDER_VAR, EFA_PROVIDER),
        (NCCL_PROTO_VAR, SIMPLE_PROTOCOL),
        (FI_EFA_FORK_SAFE_VAR, "1"),
    ]
    rdma = has_device_rdma(instance_type)
    if rdma:
        env.append((FI_EFA_USE_DEVICE_RDMA_VAR, "1"))
    return EfaSettings(
        env=tuple(env),
        reason=(
            f"{devices}: NCCL uses aws-ofi-nccl over libfabric's EFA provider, protocol Simple, "
            f"device RDMA {'on' if rdma else 'off'} ({instance_type or 'instance type unknown'}); "
            "GPU buffers pass through host memory (Debian's libfabric has no CUDA support)"
        ),
    )
