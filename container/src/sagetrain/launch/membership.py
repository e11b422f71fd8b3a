"""Proof of membership of one job: keys every host derives alone from what every host of the job has and
a peer on the network does not, and the message authentication the coordinator uses with them.

The job key is an HMAC over the job's hyperparameters.json and inputdataconfig.json (the same on every
host), the job's identity SageMaker sets in every container (TRAINING_JOB_ARN, TRAINING_JOB_NAME) and
every form of the job's secret the user gave (config/job_secret.py). A host's key is derived from it and
the host's name, so a rank's report is bound to the host it came from. resourceconfig.json differs per
host and its host list is checked separately (a worker listing other hosts is told so), so it is not
part of the key.

How strong that is: without a secret, a peer that guesses every hyperparameter and channel of a job
(and, outside SageMaker, its name) could derive the key. No one can test such guesses offline
(handshake.py), but each connection tests one. A secret in a channel file makes the key unguessable.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sagetrain.config.job import JobConfig
from sagetrain.config.job_secret import SECRET_VAR, JobSecret
from sagetrain.config.toolkit_env import TRAINING_JOB_ARN_VAR, TRAINING_JOB_NAME_VAR

JOB_IDENTITY_VARS = (TRAINING_JOB_ARN_VAR, TRAINING_JOB_NAME_VAR)
_KEY_DOMAIN = b"sagetrain job membership v1"
# What every host must share for their keys to agree, as a failure to agree names it.
MEMBERSHIP_INPUTS = (
    f"hyperparameters.json, inputdataconfig.json and job secret (if any: {SECRET_VAR}, or its channel's file)"
)


def canonical(message: Mapping[str, Any]) -> bytes:
    """The bytes a message's MAC covers: its JSON with sorted keys and no spaces (ASCII-only)."""
    return json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def mac(key: bytes, *parts: bytes) -> str:
    return hmac.new(key, b"\x00".join(parts), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Membership:
    job_key: bytes

    def __repr__(self) -> str:
        return "Membership(job_key=<hidden>)"

    @classmethod
    def of_job(cls, config: JobConfig, environ: Mapping[str, str], secret: JobSecret) -> Membership:
        material = {
            "hyperparameters": config.hyperparameters,  # with the hyperparameter form of the secret
            "input_data_config": config.raw_input_data_config,
            "job": {name: environ[name] for name in JOB_IDENTITY_VARS if environ.get(name)},
            "secret": secret.environment,
            "channel_secret": secret.channel_file.hex(),
        }
        return cls(hmac.new(_KEY_DOMAIN, canonical(material), hashlib.sha256).digest())

    def host_key(self, host: str) -> bytes:
        """What ``host`` proves its messages with."""
        return hmac.new(self.job_key, b"host\x00" + host.encode(), hashlib.sha256).digest()


def verified(key: bytes, expected: str, *parts: bytes) -> bool:
    return same_digest(mac(key, *parts), expected)


def same_digest(ours: str, theirs: str) -> bool:
    """Whether a peer's hex digest is ours, in constant time; a peer's text of any characters is simply
    not ours (hmac.compare_digest refuses text that is not ASCII)."""
    return hmac.compare_digest(ours.encode(), theirs.encode("utf-8", "surrogatepass"))
