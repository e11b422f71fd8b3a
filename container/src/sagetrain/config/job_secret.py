"""The job's secrets: what every host of the job has and nobody else, in the forms a user can give it, and
what this host makes of them: the values every line it writes masks, and the keys its hosts prove
membership of the job with. Read once (``read_job_secrets``) where the job is prepared and handed on.

- A **channel file** (recommended): the hyperparameter ``sagetrain_job_secret_channel`` names a channel
  whose one file is the secret, for example an S3 object (KMS-encrypted if you like) the job's role can
  read. DescribeTrainingJob shows the channel's S3 location, never the file's content.
- The **environment** variable ``SAGETRAIN_JOB_SECRET`` (the estimator's ``environment``) and the
  **hyperparameter** ``sagetrain_job_secret``: DescribeTrainingJob returns both in clear to anyone allowed to
  call it, so they keep out a peer on the job's network that cannot call the API, no one else.

Several forms may be given; the key takes them all.

Membership: the job key is an HMAC over the job's hyperparameters.json and inputdataconfig.json (the same
on every host), the job's identity SageMaker sets in every container (TRAINING_JOB_ARN, TRAINING_JOB_NAME)
and every form of the secret. A host's key is derived from it and the host's name, so a rank's report is
bound to the host it came from. resourceconfig.json differs per host and its host list is checked
separately (a worker listing other hosts is told so), so it is not part of the key. Without a secret, a
peer that guesses every hyperparameter and channel of a job (and, outside SageMaker, its name) could
derive the key: no one can test such guesses offline (the coordinator's handshake), but each connection
tests one. A secret in a channel file makes the key unguessable.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagetrain.config.channels import CHANNEL_NAME, InputMode, S3Distribution
from sagetrain.config.files import read_json_object
from sagetrain.config.hyperparameters import CUSTOM_MPI_OPTIONS_KEY, LaunchSettings, decode_value
from sagetrain.config.job import JobConfig
from sagetrain.config.paths import Paths
from sagetrain.config.toolkit_env import TRAINING_JOB_ARN_VAR, TRAINING_JOB_NAME_VAR
from sagetrain.contracts import canonical_json
from sagetrain.errors import SagetrainError, UserError
from sagetrain.redact import Redactor

SECRET_VAR = "SAGETRAIN_JOB_SECRET"
CHANNEL_KEY = LaunchSettings.key("job_secret_channel")
HYPERPARAMETER_KEY = LaunchSettings.key("job_secret")
# A secret is a few dozen bytes; a larger file is not one (and is not read whole into memory).
MAX_SECRET_BYTES = 64 * 1024
JOB_IDENTITY_VARS = (TRAINING_JOB_ARN_VAR, TRAINING_JOB_NAME_VAR)
_KEY_DOMAIN = b"sagetrain job membership v1"
# What every host must share for their keys to agree, as a failure to agree names it.
MEMBERSHIP_INPUTS = (
    f"hyperparameters.json, inputdataconfig.json and job secret (if any: {SECRET_VAR}, or its channel's file)"
)


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
    if not channel.input_mode.has_folder:
        raise _bad_channel(
            name,
            f"is a {channel.input_mode.value} mode channel",
            f"give that channel TrainingInputMode {InputMode.FILE.value}",
        )
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


@dataclass(frozen=True)
class Membership:
    """Proof of membership of the job: the key every host derives alone from what every host of the job
    has and a peer on the network does not."""

    job_key: bytes

    def __repr__(self) -> str:
        return "Membership(job_key=<hidden>)"

    @classmethod
    def of_job(cls, config: JobConfig, environ: Mapping[str, str], secret: JobSecret) -> Membership:
        return cls.of(config.hyperparameters, config.raw_input_data_config, environ, secret)

    @classmethod
    def of(
        cls,
        hyperparameters: Mapping[str, Any],
        input_data_config: Mapping[str, Any],
        environ: Mapping[str, str],
        secret: JobSecret,
    ) -> Membership:
        material = {
            "hyperparameters": hyperparameters,  # with the hyperparameter form of the secret
            "input_data_config": input_data_config,
            "job": {name: environ[name] for name in JOB_IDENTITY_VARS if environ.get(name)},
            "secret": secret.environment,
            "channel_secret": secret.channel_file.hex(),
        }
        return cls(hmac.new(_KEY_DOMAIN, canonical_json(material), hashlib.sha256).digest())

    def host_key(self, host: str) -> bytes:
        """What ``host`` proves its messages with."""
        return hmac.new(self.job_key, b"host\x00" + host.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class JobSecrets:
    """This host's share of the job's secrets, read once and handed on: to the launch and the SageMaker
    SDK's key exchange (the membership), to every line this host writes (the redactor), and through the
    run folder to the rank launchers (contracts.RunDir: this host's key and the values to mask)."""

    secret: JobSecret  # as this host was given it
    redactor: Redactor  # every value the job's text must mask, the secret's among them
    membership: Membership


def _ignore(redactor: Redactor) -> None:
    pass


def read_job_secrets(
    root: Path,
    environ: Mapping[str, str],
    config: JobConfig | None = None,
    *,
    channel_required: bool = True,
    learn: Callable[[Redactor], None] = _ignore,
) -> JobSecrets:
    """The job's secrets under ``root``. The switch is ``config``: given the loaded configuration, strict (a
    named channel that cannot hold the secret is the user's error; with ``channel_required``, so is its
    folder's absence); without it (the configuration did not load, and what says so must still be masked),
    lenient: the files as far as they read, what cannot be read holding no secret. ``learn`` gets the
    redactor as soon as it is known: once before the secret's file is read, so that what goes wrong there
    is said masked, and once whole."""
    if config is None:
        hyperparameters, input_data_config = _configuration_leniently(root)
    else:
        hyperparameters, input_data_config = config.hyperparameters, config.raw_input_data_config
    described = _redactor(hyperparameters, environ)
    learn(described)
    if config is None:
        secret = _secret_leniently(root, hyperparameters, environ)
    else:
        secret = read_job_secret(config, environ, required=channel_required)
    redactor = described.with_values(secret.texts())
    learn(redactor)
    return JobSecrets(secret, redactor, Membership.of(hyperparameters, input_data_config, environ, secret))


def _redactor(hyperparameters: Mapping[str, Any], environ: Mapping[str, str]) -> Redactor:
    """The job's secrets in its decoded hyperparameters (nested keys too), in its custom mpirun options (as
    mpirun gets them and as written in the hyperparameter) and in its variables."""
    options = hyperparameters.get(CUSTOM_MPI_OPTIONS_KEY)
    text = options if isinstance(options, str) else ""
    arguments = [str(option) for option in options] if isinstance(options, list) else []
    return Redactor.for_job(hyperparameters, arguments, environ, mpi_options_text=text)


def _secret_leniently(
    root: Path, hyperparameters: Mapping[str, Any], environ: Mapping[str, str]
) -> JobSecret:
    """The secret's forms as far as they read: the channel's file only if it is there to read."""
    name, given = hyperparameters.get(CHANNEL_KEY), hyperparameters.get(HYPERPARAMETER_KEY)
    channel_file = b""
    if isinstance(name, str) and CHANNEL_NAME.fullmatch(name):
        with contextlib.suppress(UserError, OSError):
            channel_file = _read_at_most(_secret_file(Paths(root).channel_dir(name), name))
    return JobSecret(channel_file, environ.get(SECRET_VAR, ""), given if isinstance(given, str) else "")


def _configuration_leniently(root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(decoded hyperparameters, inputdataconfig.json) under ``root`` as far as they read: a file that
    cannot be read is empty, a value that cannot be decoded is kept as written."""
    paths = Paths(root)
    files = []
    for path in (paths.hyperparameters, paths.input_data_config):
        try:
            files.append(read_json_object(path, required=False))
        except SagetrainError:
            files.append({})
    decoded: dict[str, Any] = {}
    for key, value in files[0].items():
        try:
            decoded[key] = decode_value(value)
        except RecursionError:
            decoded[key] = value
    return decoded, files[1]
