"""Engine choice and process counts: a pure function tested with literals."""

from __future__ import annotations

from sagetrain.config.hyperparameters import JobSettings
from sagetrain.config.resources import ResourceConfig
from sagetrain.errors import UserError
from sagetrain.plan.model import Engine, Plan, Role

DEFAULT_INTERFACE = "eth0"
SMDDP_MESSAGE = (
    "hyperparameter sagemaker_distributed_dataparallel_enabled is set, but SMDDP is not in this image; "
    "use Horovod (default)"
)


def distribution_hosts(resources: ResourceConfig, groups: tuple[str, ...] | None) -> tuple[str, ...]:
    """The hosts that train together: those of the named instance groups, in the toolkit's order."""
    if not groups:
        return resources.hosts
    known = {g.name: g for g in resources.instance_groups}
    missing = [g for g in groups if g not in known]
    if missing:
        raise UserError(
            f"hyperparameter sagemaker_distribution_instance_groups names instance group {missing[0]!r}, "
            f"which resourceconfig.json does not have (it has {sorted(known)})"
        )
    hosts: list[str] = []
    for group in resources.instance_groups:  # resourceconfig order, as sagemaker_training does
        if group.name in groups:
            hosts.extend(h for h in group.hosts if h not in hosts)
    return tuple(hosts)


def _named_engine(settings: JobSettings) -> Engine | None:
    named = [
        (settings.mpi_enabled, Engine.HOROVOD, "sagemaker_mpi_enabled"),
        (
            settings.multi_worker_mirrored_enabled,
            Engine.MULTI_WORKER_MIRRORED,
            "sagemaker_multi_worker_mirrored_strategy_enabled",
        ),
        (settings.parameter_server_enabled, Engine.PARAMETER_SERVER, "sagemaker_parameter_server_enabled"),
    ]
    chosen = [(engine, key) for enabled, engine, key in named if enabled]
    if len(chosen) > 1:
        keys = " and ".join(key for _, key in chosen)
        raise UserError(f"hyperparameters enable more than one distribution engine ({keys}); enable one")
    return chosen[0][0] if chosen else None


def make_plan(
    resources: ResourceConfig, settings: JobSettings, gpus_per_host: int, cpus_per_host: int = 0
) -> Plan:
    """The job's plan; ``cpus_per_host`` 0 means not known."""
    if settings.smddp_enabled:
        raise UserError(SMDDP_MESSAGE)
    named = _named_engine(settings)
    hosts = distribution_hosts(resources, settings.distribution_instance_groups)
    interface = settings.network_interface_name or resources.network_interface_name or DEFAULT_INTERFACE
    common = dict(
        interface=interface,
        coordinator_port=settings.coordinator_port,
        ssh_port=settings.ssh_port,
        worker_wait_seconds=settings.worker_wait_seconds,
        launch_wait_seconds=settings.launch_wait_seconds,
        tf_config_port=settings.tf_config_port,
        ps_port=settings.ps_port,
        custom_mpi_options=settings.custom_mpi_options,
    )
    current = resources.current_host
    if current not in hosts:
        return Plan(
            engine=Engine.SINGLE,
            hosts=(current,),
            master=current,
            current_host=current,
            role=Role.STANDALONE,
            processes_per_host=1,
            total_processes=1,
            reasons=(f"{current} is not in the distribution instance groups: runs the program on its own",),
            **common,
        )
    master = hosts[0]
    role = Role.MASTER if current == master else Role.WORKER
    slots = settings.mpi_processes_per_host or max(gpus_per_host, 1)

    if named is None:
        if len(hosts) * slots > 1:
            engine = Engine.HOROVOD
            reason = f"auto: {len(hosts)} host(s) x {slots} process(es) per host > 1, so Horovod over MPI"
        else:
            engine = Engine.SINGLE
            reason = "auto: one host and at most one GPU, so a single process"
    elif named is Engine.PARAMETER_SERVER and len(hosts) == 1:
        # As AWS's toolkit does: parameter servers need a second host; one host runs the program alone.
        engine, reason = Engine.SINGLE, "sagemaker_parameter_server_enabled on one host: a single process"
    else:
        engine, reason = named, f"{engine_key(named)} is set"

    if engine is Engine.HOROVOD:
        total = settings.mpi_num_processes or len(hosts) * slots
        if total > len(hosts) * slots:
            raise UserError(
                f"hyperparameter sagemaker_mpi_num_processes is {total}, more than {len(hosts)} host(s) x "
                f"{slots} process(es) per host; lower it or raise sagemaker_mpi_num_of_processes_per_host"
            )
        per_host = slots
        yield_when_idle = 0 < cpus_per_host <= per_host
    else:
        yield_when_idle = False
        per_host = 1
        total = len(hosts) if engine.uses_tf_config else 1
        if engine is Engine.SINGLE:
            hosts = (current,)
            role = Role.MASTER if current == master else Role.STANDALONE
            master = hosts[0]
    return Plan(
        engine=engine,
        hosts=hosts,
        master=master,
        current_host=current,
        role=role,
        processes_per_host=per_host,
        total_processes=total,
        mpi_yield_when_idle=yield_when_idle,
        reasons=(reason,)
        + (
            (f"{per_host} ranks per host on {cpus_per_host} CPUs: MPI yields when idle",)
            if yield_when_idle
            else ()
        ),
        **common,
    )


def engine_key(engine: Engine) -> str:
    return {
        Engine.HOROVOD: "sagemaker_mpi_enabled",
        Engine.MULTI_WORKER_MIRRORED: "sagemaker_multi_worker_mirrored_strategy_enabled",
        Engine.PARAMETER_SERVER: "sagemaker_parameter_server_enabled",
        Engine.SINGLE: "no engine",
    }[engine]
