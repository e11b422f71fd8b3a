"""resourceconfig.json: who am I, who else is in the job, which instance groups exist; read here, and
written here the way SageMaker writes it on each host (for local clusters and tests)."""

from __future__ import annotations

import collections
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagetrain.config.files import quoted
from sagetrain.config.limits import MAX_HOST_NAME_CHARACTERS, MAX_HOSTS
from sagetrain.errors import UserError

# What a host name may be (RFC 1123 labels, as SageMaker's algo-N and local mode's algo-N-xxxxx are):
# host names end up in TF_CONFIG, mpirun's host list, known_hosts and log lines.
HOST_NAME = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)

# SageMaker's names when a job has no instance groups of its own, and in local mode.
DEFAULT_INSTANCE_GROUP = "homogeneousCluster"
LOCAL_INSTANCE_TYPE = "local"


@dataclass(frozen=True)
class InstanceGroup:
    name: str
    instance_type: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class ResourceConfig:
    current_host: str
    hosts: tuple[str, ...]
    current_instance_type: str
    current_group_name: str
    instance_groups: tuple[InstanceGroup, ...]
    network_interface_name: str | None

    @property
    def is_heterogeneous(self) -> bool:
        return len(self.instance_groups) > 1


def _host_list(value: Any, source: str, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(h, str) and h for h in value):
        raise UserError(f"{source} field {field} must be a list of host names, got {quoted(value)}")
    # Counted before each name is checked: the list may be as long as the file allows.
    if len(value) > MAX_HOSTS:
        raise UserError(
            f"{source} field {field} lists {len(value):,} hosts, more than the {MAX_HOSTS:,} this image runs "
            "(SageMaker's own limit is your account's instance quota); run the job on fewer instances"
        )
    characters = sum(len(host) for host in value)
    if characters > MAX_HOST_NAME_CHARACTERS:
        raise UserError(
            f"{source} field {field} names its hosts in {characters:,} characters, more than the "
            f"{MAX_HOST_NAME_CHARACTERS:,} that fit in mpirun's host list and TF_CONFIG (SageMaker's names, "
            "algo-1, algo-2…, take far less); use shorter host names"
        )
    bad = next((host for host in value if len(host) > 253 or not HOST_NAME.fullmatch(host)), None)
    if bad is not None:
        raise UserError(
            f"{source} field {field} lists {quoted(bad)}, which is not a host name (letters, digits, '-' and "
            "'.' only); fix the file"
        )
    twice = next((host for host, count in collections.Counter(value).items() if count > 1), None)
    if twice is not None:
        raise UserError(f"{source} field {field} lists a host twice: {twice!r}")
    return tuple(value)


def parse_resource_config(raw: Mapping[str, Any], source: Path) -> ResourceConfig:
    hosts = _host_list(raw.get("hosts"), str(source), "hosts")
    if not hosts:
        raise UserError(f"{source} field hosts is empty; it must list every host of the job")
    current = raw.get("current_host")
    if not isinstance(current, str) or not current:
        raise UserError(f"{source} field current_host must be a host name, got {quoted(current)}")
    known = set(hosts)
    if current not in known:
        raise UserError(
            f"{source} field current_host {quoted(current)} is not in hosts {quoted(list(hosts))}"
        )
    groups = []
    for index, group in enumerate(raw.get("instance_groups") or []):
        where = f"instance_groups[{index}]"
        if not isinstance(group, dict) or not isinstance(group.get("instance_group_name"), str):
            raise UserError(f"{source} field {where} must be an object with instance_group_name")
        group_hosts = _host_list(group.get("hosts"), str(source), f"{where}.hosts")
        stray = [h for h in group_hosts if h not in known]
        if stray:
            raise UserError(
                f"{source} field {where}.hosts names hosts that are not in hosts: {quoted(stray)}"
            )
        groups.append(
            InstanceGroup(
                group["instance_group_name"],
                str(group.get("instance_type", LOCAL_INSTANCE_TYPE)),
                group_hosts,
            )
        )
    interface = raw.get("network_interface_name")
    if interface is not None and not isinstance(interface, str):
        raise UserError(f"{source} field network_interface_name must be a string, got {quoted(interface)}")
    return ResourceConfig(
        current_host=current,
        hosts=hosts,
        current_instance_type=str(raw.get("current_instance_type", LOCAL_INSTANCE_TYPE)),
        current_group_name=str(raw.get("current_group_name", DEFAULT_INSTANCE_GROUP)),
        instance_groups=tuple(groups),
        network_interface_name=interface or None,
    )


def resource_config(
    host: str,
    hosts: Sequence[str],
    groups: Sequence[InstanceGroup] = (),
    network_interface_name: str = "eth0",
) -> dict[str, Any]:
    """resourceconfig.json's content on ``host`` as SageMaker writes it; one group of every host when
    ``groups`` is empty."""
    groups = tuple(groups) or (InstanceGroup(DEFAULT_INSTANCE_GROUP, LOCAL_INSTANCE_TYPE, tuple(hosts)),)
    current = next((group for group in groups if host in group.hosts), None)
    if current is None:
        raise ValueError(f"host {host} is in no instance group")
    return {
        "current_host": host,
        "current_instance_type": current.instance_type,
        "current_group_name": current.name,
        "hosts": list(hosts),
        "instance_groups": [
            {
                "instance_group_name": group.name,
                "instance_type": group.instance_type,
                "hosts": list(group.hosts),
            }
            for group in groups
        ],
        "network_interface_name": network_interface_name,
    }


def host_resource_config(resource_config: Mapping[str, Any], host: str) -> dict[str, Any]:
    """resourceconfig.json as SageMaker writes it on ``host``, made from another host's: ``host`` is
    current, with its instance group and type when the config lists groups. Pure (the dry run's view
    of the other hosts)."""
    own = {**resource_config, "current_host": host}
    for group in resource_config.get("instance_groups") or []:
        if isinstance(group, dict) and host in (group.get("hosts") or []):
            own["current_group_name"] = group.get("instance_group_name")
            own["current_instance_type"] = group.get("instance_type", LOCAL_INSTANCE_TYPE)
    return own


def group_hosts(resource_config: Mapping[str, Any]) -> list[str]:
    """The hosts of the current host's instance group, as the toolkit lists them (empty when the config
    lists no groups)."""
    group = resource_config.get("current_group_name", DEFAULT_INSTANCE_GROUP)
    return next(
        (
            list(g.get("hosts") or [])
            for g in resource_config.get("instance_groups") or []
            if isinstance(g, dict) and g.get("instance_group_name") == group
        ),
        [],
    )
