"""inputdataconfig.json: the data channels; read here, and written here the way SageMaker writes it (for
local clusters and tests). ``Channel`` is the one model of a channel: the job's configuration holds
them, the tree writer (job_files.py) and the local cluster declare theirs with it, and the managed
trainer's view of a channel (trainer/channels.py) is built on it. Its data is in
``Paths.channel_dir(name)``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from sagetrain.config.files import quoted
from sagetrain.config.limits import MAX_CHANNELS, SAGEMAKER_MAX_CHANNELS
from sagetrain.errors import UserError

# SageMaker's own rule for channel names (config/limits.py): they become folder names and
# SM_CHANNEL_<NAME> variables.
CHANNEL_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class InputMode(Enum):
    """A channel's TrainingInputMode, as SageMaker spells it, with the traits the code decides on: callers
    ask a mode's traits instead of naming modes, so supporting a new mode is one member here and its line
    in ``_MODE_TRAITS`` (and a reader in trainer/ if the managed trainer is to read it in a new way)."""

    FILE = "File"  # copied to the channel's folder before the container starts
    PIPE = "Pipe"  # one FIFO per epoch beside the channel's folder (<channel>_<epoch>), read once, in order
    FAST_FILE = "FastFile"  # the channel's folder, its files fetched from S3 as they are read

    @property
    def has_folder(self) -> bool:
        """Its data is a folder of files at ``Paths.channel_dir(name)`` when the container starts: checked
        when the configuration is read, made by the tree writers, where a job's secret file can be."""
        return _MODE_TRAITS[self].has_folder

    @property
    def shardable(self) -> bool:
        """The managed trainer can deal its records out between ranks, so it reads it."""
        return _MODE_TRAITS[self].shardable

    @property
    def fetched_on_open(self) -> bool:
        """Its files come over the network as they are opened (FastFile): reading several at once hides
        that wait; on local files, threads only contend for the interpreter."""
        return _MODE_TRAITS[self].fetched_on_open

    @property
    def medium(self) -> str:
        """What its data is, for sentences: ``a FIFO`` (cannot be split between ranks)."""
        return _MODE_TRAITS[self].medium


@dataclass(frozen=True)
class _ModeTraits:
    has_folder: bool
    shardable: bool
    fetched_on_open: bool
    medium: str


_MODE_TRAITS = {
    InputMode.FILE: _ModeTraits(
        has_folder=True, shardable=True, fetched_on_open=False, medium="a folder of files"
    ),
    InputMode.PIPE: _ModeTraits(has_folder=False, shardable=False, fetched_on_open=False, medium="a FIFO"),
    InputMode.FAST_FILE: _ModeTraits(
        has_folder=True, shardable=True, fetched_on_open=True, medium="a folder of files"
    ),
}


class S3Distribution(Enum):
    """How SageMaker spread a channel's S3 objects over the hosts."""

    FULLY_REPLICATED = "FullyReplicated"  # every host has every file
    SHARDED_BY_S3_KEY = "ShardedByS3Key"  # each file is on exactly one host


@dataclass(frozen=True)
class Channel:
    """A data channel as inputdataconfig.json declares it."""

    name: str
    input_mode: InputMode = InputMode.FILE
    s3_distribution: S3Distribution = S3Distribution.FULLY_REPLICATED
    content_type: str | None = None


def _member(kind: type[Enum], value: object, source: Path, name: str, field: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(str(member.value) for member in kind)
        raise UserError(
            f"{source} channel {name!r} has {field} {quoted(value)}; expected one of {known}"
        ) from None


def parse_channels(raw: Mapping[str, Any], source: Path) -> tuple[Channel, ...]:
    if len(raw) > MAX_CHANNELS:
        raise UserError(
            f"{source} declares {len(raw):,} channels, more than the {MAX_CHANNELS} this image takes "
            f"(SageMaker takes {SAGEMAKER_MAX_CHANNELS} in a training job); put related data in one "
            "channel, a folder each"
        )
    channels = []
    for name, spec in raw.items():
        if not CHANNEL_NAME.fullmatch(name):
            raise UserError(
                f"{source} channel {quoted(name)}: a channel name may hold only letters, digits, '.', '-' "
                "and '_' (at most 64); rename the channel"
            )
        if not isinstance(spec, dict):
            raise UserError(f"{source} channel {name!r} must be an object, got {quoted(spec)}")
        content_type = spec.get("ContentType")
        channels.append(
            Channel(
                name=name,
                input_mode=_member(
                    InputMode, spec.get("TrainingInputMode", InputMode.FILE.value), source, name,
                    "TrainingInputMode",
                ),
                content_type=content_type if isinstance(content_type, str) else None,
                s3_distribution=_member(
                    S3Distribution, spec.get("S3DistributionType", S3Distribution.FULLY_REPLICATED.value),
                    source, name, "S3DistributionType",
                ),
            )
        )  # fmt: skip
    return tuple(channels)


def check_channel_folders(channels: tuple[Channel, ...], data_dir: Path, source: Path) -> None:
    """Channels whose mode has a folder must have it under ``data_dir``; the others (Pipe: FIFOs created
    as read) have none to check."""
    for channel in channels:
        folder = data_dir / channel.name
        if channel.input_mode.has_folder and not folder.is_dir():
            raise UserError(
                f"{source} declares channel {channel.name!r} but its folder {folder} does not exist; "
                "mount the data there or remove the channel"
            )


def input_data_config(channels: Iterable[Channel]) -> dict[str, dict[str, str]]:
    """inputdataconfig.json's content as SageMaker writes it."""
    config: dict[str, dict[str, str]] = {}
    for channel in channels:
        entry = {
            "TrainingInputMode": channel.input_mode.value,
            "S3DistributionType": channel.s3_distribution.value,
            "RecordWrapperType": "None",
        }
        if channel.content_type is not None:
            entry["ContentType"] = channel.content_type
        config[channel.name] = entry
    return config
