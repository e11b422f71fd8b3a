"""The plan: frozen values a launcher executes."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from sagetrain.config.hyperparameters import LaunchSettings
from sagetrain.config.mpi_options import PLACEMENT_OPTIONS, option_keys
from sagetrain.engines import Engine
from sagetrain.plan.stop import DEFAULT_STOP_WINDOW, StopWindow


class Role(Enum):
    """This host's part in the job.

    MASTER runs the coordinator and (for MPI) mpirun; WORKER joins the master's coordinator;
    STANDALONE is a host outside the distribution instance groups, running the program on its own.
    """

    MASTER = "master"
    WORKER = "worker"
    STANDALONE = "standalone"


@dataclass(frozen=True)
class Plan:
    engine: Engine
    hosts: tuple[str, ...]  # the hosts that train together, master first
    master: str
    current_host: str
    role: Role
    processes_per_host: int
    total_processes: int
    interface: str  # as requested; the launcher resolves it against this host's interfaces
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    custom_mpi_options: tuple[str, ...] = ()
    # As many ranks as CPUs or more on a host: Open MPI's busy polling would take the CPU a rank needs.
    mpi_yield_when_idle: bool = False
    reasons: tuple[str, ...] = ()  # why this engine and counts, for the log and the dry run
    # Every program runs with tf-keras as `keras` and `tf.keras` (sagetrain/legacy_keras.py).
    legacy_keras: bool = False
    stop: StopWindow = DEFAULT_STOP_WINDOW  # from SIGTERM to this host's exit
    # NCCL's and libfabric's settings on a host with EFA (plan/efa.py); empty without EFA. The job's
    # environment gets each one the user did not set.
    efa_env: tuple[tuple[str, str], ...] = ()

    @property
    def multi_host(self) -> bool:
        return len(self.hosts) > 1

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(h for h in self.hosts if h != self.master)

    def ranks_on(self, host: str) -> range:
        """The ranks that run on ``host`` (MPI fills hosts in order, ``-map-by slot``)."""
        if host not in self.hosts:
            return range(0)
        first = self.hosts.index(host) * self.processes_per_host
        return range(first, max(first, min(first + self.processes_per_host, self.total_processes)))

    @property
    def places_ranks(self) -> bool:
        """Whether the ranks run where ``ranks_on`` says, not where custom mpirun options put them."""
        return not option_keys(self.custom_mpi_options) & PLACEMENT_OPTIONS

    def host_of_rank(self, rank: int) -> str | None:
        """The host ``rank`` runs on; None when that is not known before it starts."""
        if not self.places_ranks:
            return None
        return next((host for host in self.hosts if rank in self.ranks_on(host)), None)

    def processes_on(self, host: str) -> int:
        """How many ranks run on ``host``."""
        return len(self.ranks_on(host))
