"""The coordinator: how the hosts of a job (and their ranks) reach the master, proving membership of the job
on every connection. What the launcher and the SageMaker SDK's key exchange use is here; the rest is its
layers, lowest first:

    wire.py     the messages, their JSON codec and limits, ``Connection`` (framing, MAC)
    trust.py    the handshake (SPAKE2 over a host's key), its two sides, the master's admission
    events.py   what the engines' loops react to, in one queue, and the hosts' start waiting in it
    server.py   the master's server        client.py   a worker's connection, a rank launcher's reports
    hosts.py    the master's and a worker's side for one job, over those two
"""

from sagetrain.launch.coordinator.client import send_rank_failure, send_rank_started
from sagetrain.launch.coordinator.events import (
    Event,
    EventQueue,
    HostChanged,
    HostState,
    JobFailedEarly,
    MasterEnded,
    ProcessExited,
    RankReport,
    failure_of,
)
from sagetrain.launch.coordinator.hosts import (
    LOOPBACK,
    DeadlineFor,
    JobHosts,
    MasterCoordinator,
    WorkerCoordinator,
    coordinator_address,
)
from sagetrain.launch.coordinator.wire import (
    CORE,
    Catalogue,
    Hello,
    Members,
    Outcome,
    Ready,
    Welcome,
    WireMessage,
)

__all__ = [
    "CORE",
    "LOOPBACK",
    "Catalogue",
    "DeadlineFor",
    "Event",
    "EventQueue",
    "Hello",
    "HostChanged",
    "HostState",
    "JobFailedEarly",
    "JobHosts",
    "MasterCoordinator",
    "MasterEnded",
    "Members",
    "Outcome",
    "ProcessExited",
    "RankReport",
    "Ready",
    "Welcome",
    "WireMessage",
    "WorkerCoordinator",
    "coordinator_address",
    "failure_of",
    "send_rank_failure",
    "send_rank_started",
]
