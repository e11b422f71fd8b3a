"""TF_CONFIG for the tf.distribute engines: the same cluster on every host, a task per process.

The engine's ``TfCluster`` (engines.py) says which: multi-worker mirrored makes every host a ``worker``,
index = its position in the host list; parameter server makes the master the ``chief``, the other hosts
``worker``s, and every host also runs a ``ps`` task on its own port (the layout AWS's toolkit uses, with
TF2's task names).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from sagetrain.engines import TfCluster
from sagetrain.plan.model import Plan

# The variable TensorFlow's cluster resolver reads.
TF_CONFIG_VAR = "TF_CONFIG"


class TaskType(Enum):
    CHIEF = "chief"
    WORKER = "worker"
    PS = "ps"


def tf_cluster(plan: Plan) -> TfCluster:
    cluster = plan.engine.entry.tf_cluster
    if cluster is None:
        raise ValueError(f"engine {plan.engine.value} does not use TF_CONFIG")
    return cluster


def cluster_spec(plan: Plan) -> dict[str, list[str]]:
    def addresses(hosts: tuple[str, ...], port: int) -> list[str]:
        return [f"{host}:{port}" for host in hosts]

    layout = tf_cluster(plan)
    cluster: dict[str, list[str]] = {}
    if layout.master_is_chief:
        cluster[TaskType.CHIEF.value] = addresses(plan.hosts[:1], plan.launch.tf_config_port)
    workers = plan.workers if layout.master_is_chief else plan.hosts
    if workers:
        cluster[TaskType.WORKER.value] = addresses(workers, plan.launch.tf_config_port)
    if layout.parameter_servers:
        cluster[TaskType.PS.value] = addresses(plan.hosts, plan.launch.ps_port)
    return cluster


def program_task(plan: Plan, host: str) -> tuple[TaskType, int]:
    """The task the user's program runs as on ``host``."""
    if not tf_cluster(plan).master_is_chief:
        return TaskType.WORKER, plan.hosts.index(host)
    if host == plan.master:
        return TaskType.CHIEF, 0
    return TaskType.WORKER, plan.workers.index(host)


def tf_config(plan: Plan, host: str, task: TaskType | None = None) -> dict[str, Any]:
    """TF_CONFIG for the program on ``host``, or for its parameter server with ``task=TaskType.PS``."""
    if task is TaskType.PS:
        task_type, index = TaskType.PS, plan.hosts.index(host)
    else:
        task_type, index = program_task(plan, host)
    return {"cluster": cluster_spec(plan), "task": {"type": task_type.value, "index": index}}
