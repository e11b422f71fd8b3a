"""The distribution engines, and the one registry that planning, launching, the dry run and the managed
trainer read.

Adding an engine: a member of ``Engine`` and its ``REGISTRY`` entry here; one module under ``launch/``
with ``make_run(spec) -> EngineRun`` and ``describe(spec, environ) -> dict`` only when no existing one
runs its layout (a new TF_CONFIG cluster is a ``TfCluster``, run by ``launch/tf_distribute.py`` as it is).
docs/architecture.md has the recipe. Nothing else switches on the engine.
Importing this module imports neither the launchers nor TensorFlow: entries name them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Engine(Enum):
    """How the user's program is distributed. The value is what ``SAGETRAIN_ENGINE`` carries."""

    SINGLE = "single"
    HOROVOD = "horovod"  # OpenMPI mpirun; Horovod, mpi4py or any MPI program
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"  # TF_CONFIG, one process per host
    PARAMETER_SERVER = "parameter_server"  # TF_CONFIG with chief/worker/ps tasks

    @property
    def entry(self) -> EngineEntry:
        return REGISTRY[self]


class Layout(Enum):
    """Where an engine's processes run."""

    ONE = "one"  # one process, on this host only
    PER_SLOT = "per_slot"  # a rank per slot (GPU, or sagemaker_mpi_num_of_processes_per_host) on every host
    ONE_PER_HOST = "one_per_host"  # one process per host, with TF_CONFIG (``TfCluster``)


@dataclass(frozen=True)
class TfCluster:
    """How a TF_CONFIG engine lays out its cluster (plan/tf_config.py) and when its job has succeeded
    (launch/tf_distribute.py)."""

    # The master's program is TensorFlow's "chief" task, the other hosts' "worker"s (else every host's
    # program is a "worker", in host order).
    master_is_chief: bool = False
    # Every host also runs a parameter server task ("ps", on sagetrain_ps_port).
    parameter_servers: bool = False
    # The job has succeeded when the master's program has (the other hosts' programs may serve until
    # they are stopped); else when every host's program has.
    decided_by_master: bool = False


@dataclass(frozen=True)
class EngineEntry:
    # The SDK hyperparameter that selects it (the SDK's ``distribution`` becomes it); None: never named.
    enabled_by: str | None
    # The module under launch/ that runs it (make_run, describe).
    launcher: str
    layout: Layout
    # ``module:callable`` making the managed trainer's collectives for a rank; None: the trainer refuses
    # the engine with ``trainer_refusal``.
    trainer: str | None
    trainer_refusal: str = ""
    # Fewer hosts than this: the job runs as a single process (as AWS's toolkit does for one-host PS).
    min_hosts: int = 1
    # ONE_PER_HOST: its TF_CONFIG cluster.
    tf_cluster: TfCluster | None = None
    # Its ranks load Horovod, whose CUDA kernels set the oldest NVIDIA driver they run on.
    loads_horovod: bool = False


REGISTRY: dict[Engine, EngineEntry] = {
    Engine.SINGLE: EngineEntry(
        enabled_by=None,
        launcher="sagetrain.launch.single",
        layout=Layout.ONE,
        trainer="sagetrain.trainer.collectives:SingleProcess",
    ),
    Engine.HOROVOD: EngineEntry(
        enabled_by="sagemaker_mpi_enabled",
        launcher="sagetrain.launch.mpi",
        layout=Layout.PER_SLOT,
        trainer="sagetrain.trainer.collectives:HorovodCollectives",
        loads_horovod=True,
    ),
    Engine.MULTI_WORKER_MIRRORED: EngineEntry(
        enabled_by="sagemaker_multi_worker_mirrored_strategy_enabled",
        launcher="sagetrain.launch.tf_distribute",
        layout=Layout.ONE_PER_HOST,
        trainer="sagetrain.trainer.collectives:MultiWorkerCollectives",
        tf_cluster=TfCluster(),
    ),
    Engine.PARAMETER_SERVER: EngineEntry(
        enabled_by="sagemaker_parameter_server_enabled",
        launcher="sagetrain.launch.tf_distribute",
        layout=Layout.ONE_PER_HOST,
        trainer=None,
        trainer_refusal=(
            "the managed Keras trainer does not run on the parameter_server engine; remove "
            "sagemaker_parameter_server_enabled to use Horovod, or train with a script"
        ),
        min_hosts=2,
        tf_cluster=TfCluster(master_is_chief=True, parameter_servers=True, decided_by_master=True),
    ),
}

# With no engine named: the one a job of more than one process gets (Horovod over MPI).
ZERO_CONFIG_DISTRIBUTED = Engine.HOROVOD


def load(reference: str) -> Any:
    """The object ``module`` or ``module:attribute`` names (imported now)."""
    module_name, _, attribute = reference.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attribute) if attribute else module
