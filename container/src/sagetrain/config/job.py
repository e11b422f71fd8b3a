"""The whole job configuration, read once and validated into frozen values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagetrain.config.channels import Channel, check_channel_folders, parse_channels
from sagetrain.config.files import read_json_object
from sagetrain.config.hyperparameters import (
    LOG_LEVEL_KEY,
    PROGRAM_KEY,
    SAGETRAIN_PREFIX,
    TOO_LARGE_HINT,
    JobSettings,
    parse_settings,
    read_hyperparameters,
    user_hyperparameters,
    with_environment,
)
from sagetrain.config.paths import Paths
from sagetrain.config.resources import ResourceConfig, parse_resource_config
from sagetrain.config.sdk_source_code import with_source_code


@dataclass(frozen=True)
class JobConfig:
    paths: Paths
    resources: ResourceConfig
    settings: JobSettings
    channels: tuple[Channel, ...]
    # The files' contents, as the toolkit's Environment wants them (validated above).
    raw_resource_config: dict[str, Any]
    raw_input_data_config: dict[str, Any]
    hyperparameters: dict[str, Any]  # decoded, all keys

    @property
    def toolkit_hyperparameters(self) -> dict[str, Any]:
        """What sagemaker_training may see: everything but our own ``sagetrain_*`` keys, with the program
        and the log level as settled here (a hyperparameter, the SDK's source code file or the
        environment), so that its SM_* variables say what runs."""
        kept = {k: v for k, v in self.hyperparameters.items() if not k.startswith(SAGETRAIN_PREFIX)}
        if self.settings.program is not None:
            kept[PROGRAM_KEY] = self.settings.program
        if self.settings.log_level is not None:
            kept[LOG_LEVEL_KEY] = self.settings.log_level
        return kept

    @property
    def user_hyperparameters(self) -> dict[str, Any]:
        """What the user's program gets: no ``sagemaker_*``, ``sagetrain_*`` or toolkit keys."""
        return user_hyperparameters(self.hyperparameters)

    def channel(self, name: str) -> Channel | None:
        return next((channel for channel in self.channels if channel.name == name), None)


def load_job_config(
    root: Path, *, check_channels: bool = True, environ: Mapping[str, str] | None = None
) -> JobConfig:
    """The job's configuration under ``root``; ``environ``: the container's environment, for what a
    derived image may set there instead of a hyperparameter (the program, the log level)."""
    paths = Paths(root)
    raw_resources = read_json_object(paths.resource_config)
    resources = parse_resource_config(raw_resources, paths.resource_config)
    raw_hyperparameters = read_json_object(
        paths.hyperparameters, required=False, too_large_hint=TOO_LARGE_HINT
    )
    hyperparameters = read_hyperparameters(raw_hyperparameters, paths.hyperparameters)
    # With the SageMaker SDK v3's SourceCode, its sourcecode.json names the program.
    settings = with_source_code(parse_settings(hyperparameters, paths.hyperparameters), paths)
    settings = with_environment(settings, environ or {})
    raw_channels = read_json_object(paths.input_data_config, required=False)
    channels = parse_channels(raw_channels, paths.input_data_config)
    if check_channels:
        check_channel_folders(channels, paths.data_dir, paths.input_data_config)
    return JobConfig(
        paths=paths,
        resources=resources,
        settings=settings,
        channels=channels,
        raw_resource_config=raw_resources,
        raw_input_data_config=raw_channels,
        hyperparameters=hyperparameters,
    )
