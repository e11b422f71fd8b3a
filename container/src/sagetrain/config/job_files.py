"""The /opt/ml tree SageMaker gives each host before its container starts, written the way SageMaker
writes it: hyperparameters.json with JSON-encoded values, that host's resourceconfig.json,
inputdataconfig.json, and the folders. The local cluster, the tests and the benchmarks write their trees
here, with the writers that sit beside this package's readers, so the two cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sagetrain.config.channels import Channel, input_data_config
from sagetrain.config.hyperparameters import encode_hyperparameters
from sagetrain.config.local_paths import local_path_config
from sagetrain.config.paths import Paths
from sagetrain.config.resources import InstanceGroup, resource_config


@dataclass(frozen=True)
class JobFiles:
    """One job's configuration files; ``write`` puts one host's tree on disk."""

    hosts: tuple[str, ...]
    hyperparameters: Mapping[str, object] = field(default_factory=dict)  # values as the SDK takes them
    channels: tuple[Channel, ...] = ()
    instance_groups: tuple[InstanceGroup, ...] = ()
    network_interface: str = "eth0"
    # The TensorBoard output config's LocalPath; None: the job has no TensorBoard output config.
    tensorboard_local_path: str | None = None
    # The checkpoint config's LocalPath; None: the job has no checkpoint config.
    checkpoint_local_path: str | None = None

    def write(self, root: Path, host: str) -> Paths:
        """``host``'s tree under ``root``: the three config files (and the TensorBoard output and checkpoint
        configs, when the job has them), a folder per channel whose input mode has one,
        and the model, output/data and code folders; what is already there stays."""
        paths = Paths(root)
        config = {
            paths.hyperparameters: encode_hyperparameters(self.hyperparameters),
            paths.resource_config: resource_config(
                host, self.hosts, self.instance_groups, self.network_interface
            ),
            paths.input_data_config: input_data_config(self.channels),
        }
        if self.tensorboard_local_path is not None:
            config[paths.tensorboard_config] = local_path_config(self.tensorboard_local_path)
        if self.checkpoint_local_path is not None:
            config[paths.checkpoint_config] = local_path_config(self.checkpoint_local_path)
        for path, content in config.items():
            write_json(path, content)
        for channel in self.channels:
            if channel.input_mode.has_folder:
                paths.channel_dir(channel.name).mkdir(parents=True, exist_ok=True)
        for folder in (paths.model_dir, paths.output_data_dir, paths.code_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return paths


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
