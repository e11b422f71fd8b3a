"""inputdataconfig.json: the data channels and where their data is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from sagetrain.errors import UserError


class InputMode(Enum):
    FILE = "File"
    PIPE = "Pipe"
    FAST_FILE = "FastFile"


@dataclass(frozen=True)
class Channel:
    name: str
    path: Path
    input_mode: InputMode
    content_type: str | None
    s3_distribution_type: str


def parse_channels(raw: Mapping[str, Any], data_dir: Path, source: Path) -> tuple[Channel, ...]:
    channels = []
    for name, spec in raw.items():
        if not isinstance(spec, dict):
            raise UserError(f"{source} channel {name!r} must be an object, got {spec!r}")
        mode_name = spec.get("TrainingInputMode", "File")
        try:
            mode = InputMode(mode_name)
        except ValueError:
            known = ", ".join(m.value for m in InputMode)
            raise UserError(
                f"{source} channel {name!r} has TrainingInputMode {mode_name!r}; expected one of {known}"
            ) from None
        channels.append(
            Channel(
                name=name,
                path=data_dir / name,
                input_mode=mode,
                content_type=spec.get("ContentType"),
                s3_distribution_type=str(spec.get("S3DistributionType", "FullyReplicated")),
            )
        )
    return tuple(channels)


def check_channel_folders(channels: tuple[Channel, ...], source: Path) -> None:
    """File and FastFile channels must have their folder; Pipe channels are FIFOs created as read."""
    for channel in channels:
        if channel.input_mode is not InputMode.PIPE and not channel.path.is_dir():
            raise UserError(
                f"{source} declares channel {channel.name!r} but its folder {channel.path} does not exist; "
                "mount the data there or remove the channel"
            )
