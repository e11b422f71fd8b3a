"""Engine choice and process counts: a pure function tested with literals."""

from __future__ import annotations

import dataclasses
import functools

from sagetrain.config.hyperparameters import (
    DISTRIBUTION_GROUPS_KEY,
    NUM_PROCESSES_KEY,
    PROCESSES_PER_HOST_KEY,
    SMDDP_KEY,
    JobSettings,
    LaunchSettings,
)
from sagetrain.config.limits import MAX_PROCESSES_PER_CPU_OR_GPU
from sagetrain.config.resources import ResourceConfig
from sagetrain.engines import ZERO_CONFIG_DISTRIBUTED, Engine, Layout
from sagetrain.errors import UserError
from sagetrain.plan.efa import efa_settings
from sagetrain.plan.model import Plan, Role
from sagetrain.plan.stop import stop_window

DEFAULT_INTERFACE = "eth0"
SMDDP_MESSAGE = f"hyperparameter {SMDDP_KEY} is set, but SMDDP is not in this image; use Horovod (default)"


def distribution_hosts(resources: ResourceConfig, groups: tuple[str, ...] | None) -> tuple[str, ...]:
    """The hosts that train together: those of the named instance groups, in the toolkit's order."""
    if not groups:
        return resources.hosts
    known = {g.name: g for g in resources.instance_groups}
    missing = [g for g in groups if g not in known]
    if missing:
        raise UserError(
            f"hyperparameter {DISTRIBUTION_GROUPS_KEY} names instance group {missing[0]!r}, "
            f"which resourceconfig.json does not have (it has {sorted(known)})"
        )
    hosts: list[str] = []
    for group in resources.instance_groups:  # resourceconfig order, as sagemaker_training does
        if group.name in groups:
            hosts.extend(h for h in group.hosts if h not in hosts)
    return tuple(hosts)


def _named_engine(settings: JobSettings) -> Engine | None:
    if len(settings.enabled_engines) > 1:
        keys = " and ".join(str(engine.entry.enabled_by) for engine in settings.enabled_engines)
        raise UserError(f"hyperparameters enable more than one distribution engine ({keys}); enable one")
    return settings.enabled_engines[0] if settings.enabled_engines else None


def check_processes_per_host(asked: int | None, gpus: int, cpus: int) -> None:
    """Refuse more ranks per host than MAX_PROCESSES_PER_CPU_OR_GPU times the host's CPUs or GPUs, the more
    numerous (``cpus`` 0: not known, nothing refused): mpirun would try to start them all, and hang. Pure."""
    most = MAX_PROCESSES_PER_CPU_OR_GPU * max(cpus, gpus)
    if asked is None or cpus <= 0 or asked <= most:
        return
    raise UserError(
        f"hyperparameter {PROCESSES_PER_HOST_KEY} is {asked}, more than {MAX_PROCESSES_PER_CPU_OR_GPU} "
        f"processes for each of this host's {cpus} CPUs and {gpus} GPUs ({most} at most); lower it: one rank "
        "per GPU, or per CPU core on a CPU instance, is usual"
    )


def _choose_engine(named: Engine | None, hosts: int, slots: int) -> tuple[Engine, str]:
    """The engine and why."""
    if named is None:
        if hosts * slots > 1:
            return ZERO_CONFIG_DISTRIBUTED, (
                f"auto: {hosts} host(s) x {slots} process(es) per host > 1, so Horovod over MPI"
            )
        return Engine.SINGLE, "auto: one host and at most one GPU, so a single process"
    if hosts < named.entry.min_hosts:
        # As AWS's toolkit does: parameter servers need a second host; one host runs the program alone.
        return Engine.SINGLE, f"{named.entry.enabled_by} on one host: a single process"
    return named, f"{named.entry.enabled_by} is set"


def make_plan(
    resources: ResourceConfig,
    settings: JobSettings,
    gpus_per_host: int,
    cpus_per_host: int = 0,
    *,
    legacy_keras_env: bool = False,
    efa_devices: tuple[str, ...] = (),
    nccl_efa_plugin: str | None = None,
) -> Plan:
    """The job's plan; ``cpus_per_host`` 0 means not known; ``legacy_keras_env``: the container's
    environment asks for the legacy-Keras switch (the hyperparameter can too); ``efa_devices``: the EFA
    devices this host's container can open, ``nccl_efa_plugin``: the image's NCCL plugin for EFA, if any
    (plan/efa.py decides what they need)."""
    plan = _distribution_plan(resources, settings, gpus_per_host, cpus_per_host, legacy_keras_env)
    efa = efa_settings(efa_devices, gpus_per_host, resources.current_instance_type, nccl_efa_plugin)
    if efa.reason is None:
        return plan
    return dataclasses.replace(plan, efa_env=efa.env, reasons=(*plan.reasons, efa.reason))


def _distribution_plan(
    resources: ResourceConfig,
    settings: JobSettings,
    gpus_per_host: int,
    cpus_per_host: int,
    legacy_keras_env: bool,
) -> Plan:
    """Engine, hosts, roles and process counts."""
    if settings.smddp_enabled:
        raise UserError(SMDDP_MESSAGE)
    named = _named_engine(settings)
    legacy_keras = settings.launch.legacy_keras or legacy_keras_env
    hosts = distribution_hosts(resources, settings.distribution_instance_groups)
    interface = settings.network_interface_name or resources.network_interface_name or DEFAULT_INTERFACE
    current = resources.current_host
    stop = stop_window(
        settings.launch.stop_seconds, resources.current_instance_type, LaunchSettings.key("stop_seconds")
    )
    laid_out = functools.partial(
        Plan, current_host=current, interface=interface, launch=settings.launch,
        custom_mpi_options=settings.custom_mpi_options, legacy_keras=legacy_keras, stop=stop,
    )  # fmt: skip
    if current not in hosts:
        return laid_out(
            engine=Engine.SINGLE, hosts=(current,), master=current, role=Role.STANDALONE,
            processes_per_host=1, total_processes=1,
            reasons=(f"{current} is not in the distribution instance groups: runs the program on its own",),
        )  # fmt: skip
    slots = settings.mpi_processes_per_host or max(gpus_per_host, 1)
    engine, reason = _choose_engine(named, len(hosts), slots)
    layout = engine.entry.layout
    if layout is Layout.ONE:
        role = Role.MASTER if current == hosts[0] else Role.STANDALONE
        return laid_out(
            engine=engine, hosts=(current,), master=current, role=role, processes_per_host=1,
            total_processes=1, reasons=(reason,),
        )  # fmt: skip
    role = Role.MASTER if current == hosts[0] else Role.WORKER
    if layout is Layout.ONE_PER_HOST:
        return laid_out(
            engine=engine, hosts=hosts, master=hosts[0], role=role, processes_per_host=1,
            total_processes=len(hosts), reasons=(reason,),
        )  # fmt: skip
    check_processes_per_host(settings.mpi_processes_per_host, gpus_per_host, cpus_per_host)
    total = settings.mpi_num_processes or len(hosts) * slots
    if total > len(hosts) * slots:
        raise UserError(
            f"hyperparameter {NUM_PROCESSES_KEY} is {total}, more than {len(hosts)} host(s) x "
            f"{slots} process(es) per host; lower it or raise {PROCESSES_PER_HOST_KEY}"
        )
    yield_when_idle = 0 < cpus_per_host <= slots
    reasons = (reason, f"{slots} ranks per host on {cpus_per_host} CPUs: MPI yields when idle")
    return laid_out(
        engine=engine, hosts=hosts, master=hosts[0], role=role, processes_per_host=slots,
        total_processes=total, mpi_yield_when_idle=yield_when_idle,
        reasons=reasons if yield_when_idle else reasons[:1],
    )  # fmt: skip
