"""The job's secret: what every host of the job has and nobody else, in the forms a user can give it.

- A **channel file** (recommended): the hyperparameter ``sagetrain_job_secret_channel`` names a channel
  whose one file is the secret, for example an S3 object (KMS-encrypted if you like) the job's role can
  read. DescribeTrainingJob shows the channel's S3 location, never the file's content.
- The **environment** variable ``SAGETRAIN_JOB_SECRET`` (the estimator's ``environment``) and the
  **hyperparameter** ``sagetrain_job_secret``: DescribeTrainingJob returns both in clear to anyone allowed to
  call it, so they keep out a peer on the job's network that cannot call the API, no one else.

Several forms may be given; the key takes them all. Read here, once; launch/membership.py turns it into
the job's key. Here too: every value the job's text must mask (``job_redactor``), the secret's among
them, also for the processes that do not load the whole configuration (``read_job_redactor``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagetrain.config.channels import CHANNEL_NAME, InputMode, S3Distribution
from sagetrain.config.files import read_json_object
from sagetrain.config.hyperparameters import CUSTOM_MPI_OPTIONS_KEY, LaunchSettings, decode_value
from sagetrain.config.job import JobConfig
from sagetrain.config.paths import Paths
from sagetrain.errors import SagetrainError, UserError
from sagetrain.redact import Redactor

SECRET_VAR = "SAGETRAIN_JOB_SECRET"
CHANNEL_KEY = LaunchSettings.key("job_secret_channel")
HYPERPARAMETER_KEY = LaunchSettings.key("job_secret")
# A secret is a few dozen bytes; a larger file is not one (and is not read whole into memory).
MAX_SECRET_BYTES = 64 * 1024


@dataclass(frozen=True)
class JobSecret:
    """The secret forms this host was given (empty when none was)."""

    channel_file: bytes = b""
    environment: str = ""
    hyperparameter: str = ""

    def __repr__(self) -> str:
        return f"JobSecret(given={self.forms()})"

    def forms(self) -> tuple[str, ...]:
        """How the secret was given, by name: for messages, never the values."""
        named = (
            (CHANNEL_KEY, self.channel_file),
            (SECRET_VAR, self.environment),
            (HYPERPARAMETER_KEY, self.hyperparameter),
        )
        return tuple(name for name, value in named if value)

    @property
    def given(self) -> bool:
        return bool(self.forms())

    def texts(self) -> tuple[str, ...]:
        """The values as text, for masking wherever they might appear in what we write."""
        channel = self.channel_file.decode("utf-8", errors="replace").strip()
        return tuple(text for text in (channel, self.environment, self.hyperparameter) if text)


def _bad_channel(channel: str, problem: str, remedy: str) -> UserError:
    return UserError(f"hyperparameter {CHANNEL_KEY} names channel {channel!r}, which {problem}; {remedy}")


def _secret_file(folder: Path, channel: str) -> Path:
    if not folder.is_dir():
        raise _bad_channel(
            channel, f"has no folder {folder}", "give the channel an S3 object holding the secret"
        )
    files = [path for path in sorted(folder.rglob("*")) if not path.is_dir()]
    if len(files) != 1:
        found = f"holds {len(files)} files" if files else "holds no file"
        raise _bad_channel(
            channel, found, "give it exactly one file, the secret (one S3 object, not a prefix)"
        )
    if not files[0].is_file() or files[0].is_symlink():
        raise _bad_channel(
            channel, f"holds {files[0].name}, which is not a regular file", "give it the secret as a file"
        )
    return files[0]


def _read_at_most(path: Path) -> bytes:
    with path.open("rb") as stream:
        return stream.read(MAX_SECRET_BYTES + 1)


def read_channel_secret(config: JobConfig, *, required: bool) -> bytes:
    """The secret file's bytes, or b"" when no channel is named (or, not ``required``, its folder is not
    here: a dry run)."""
    name = config.settings.launch.job_secret_channel
    if not name:
        return b""
    channel = config.channel(name)
    if channel is None:
        raise _bad_channel(name, "inputdataconfig.json does not declare", "add that channel or fix the name")
    if channel.input_mode is InputMode.PIPE:
        raise _bad_channel(name, "is a Pipe mode channel", "give that channel TrainingInputMode File")
    if channel.s3_distribution is not S3Distribution.FULLY_REPLICATED:
        raise _bad_channel(
            name,
            "is sharded, so only one host would have the file",
            "give that channel S3DistributionType FullyReplicated",
        )
    folder = config.paths.channel_dir(name)
    if not required and not folder.exists():
        return b""
    path = _secret_file(folder, name)
    value = _read_at_most(path)
    if not value.strip():
        raise _bad_channel(name, f"holds an empty file {path.name}", "put the secret in it")
    if len(value) > MAX_SECRET_BYTES:
        raise _bad_channel(
            name,
            f"holds {path.name}, larger than {MAX_SECRET_BYTES} bytes",
            "give a file holding the secret alone",
        )
    return value


def read_job_secret(config: JobConfig, environ: Mapping[str, str], *, required: bool = True) -> JobSecret:
    """Every form of the job's secret this host was given. ``required``: a named channel must be here."""
    return JobSecret(
        channel_file=read_channel_secret(config, required=required),
        environment=environ.get(SECRET_VAR, ""),
        hyperparameter=config.settings.launch.job_secret,
    )


def missing_secret_warning(host_count: int, secret: JobSecret) -> str | None:
    """What a multi-host job without a secret says once, on every path; None otherwise. Pure."""
    if host_count < 2 or secret.given:
        return None
    return (
        f"this {host_count}-host job has no job secret, so the key its hosts prove membership with derives "
        "from the job's description (hyperparameters, channels, job name); a peer on the job's network that "
        "knows all of it could join: put a random secret in an S3 object, give it as a channel (File mode, "
        f"FullyReplicated) and name that channel with the hyperparameter {CHANNEL_KEY}"
    )


def job_redactor(
    hyperparameters: Mapping[str, Any], environ: Mapping[str, str], channel_file: bytes = b""
) -> Redactor:
    """The job's secrets: in its decoded hyperparameters (nested keys too), in its custom mpirun options
    (as mpirun gets them and as written in the hyperparameter), in its variables, and the secret's file."""
    options = hyperparameters.get(CUSTOM_MPI_OPTIONS_KEY)
    text = options if isinstance(options, str) else ""
    arguments = [str(option) for option in options] if isinstance(options, list) else []
    redactor = Redactor.for_job(hyperparameters, arguments, environ, mpi_options_text=text)
    from_file = JobSecret(channel_file=channel_file).texts()
    return Redactor.of((*redactor.secrets, *from_file)) if from_file else redactor


def _channel_secret_leniently(root: Path, hyperparameters: Mapping[str, Any]) -> bytes:
    name = hyperparameters.get(CHANNEL_KEY)
    if not isinstance(name, str) or not CHANNEL_NAME.fullmatch(name):
        return b""
    try:
        return _read_at_most(_secret_file(Paths(root).channel_dir(name), name))
    except (UserError, OSError):
        return b""


def read_job_redactor(root: Path, environ: Mapping[str, str]) -> Redactor:
    """``job_redactor`` of the hyperparameters.json and the secret's file under ``root``, read leniently
    (what cannot be read holds no secret): for the message about a configuration that did not load, and
    for the processes that do not load it (the rank launcher, the SageMaker SDK's hooks)."""
    try:
        raw = read_json_object(Paths(root).hyperparameters, required=False)
    except SagetrainError:
        raw = {}
    decoded: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            decoded[key] = decode_value(value)
        except RecursionError:
            decoded[key] = value
    return job_redactor(decoded, environ, _channel_secret_leniently(root, decoded))
