"""The coordinator's messages between hosts (and from rank launchers): a kind each, a frozen dataclass each,
their JSON encoding and their limits. Every sender and reader uses this module; nothing else spells a
message's kind or fields.

On the wire a message is one JSON object on one line, its kind in the field ``type``::

    master → peer     Challenge(nonce)                   the first line of every connection
    peer   → master   Hello | RankStarted | RankFailed   its first message, with the handshake fields
                      host, nonce and mac (coordinator.py: how they prove membership of the job)
    master → worker   Welcome(ssh_client_key)            or Reject(reason), and the connection closes
    worker → master   Ready()                            MPI: this host's sshd accepts the master's key
    worker → master   Outcome(verdict)                   TF_CONFIG: how this host's program ended
    master → worker   JobVerdict(verdict)                the job's end; the worker exits with it
    master → rank     Ack()                              a rank launcher's report arrived

A line longer than ``MAX_MESSAGE_BYTES``, or one that does not decode to one of these, is not a message.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, TypeVar

from sagetrain.report.verdict import RankFailure, Verdict

# A verdict's detail (traceback, last lines) is the largest message; a longer line is not ours.
MAX_MESSAGE_BYTES = 1 << 20
# The field naming a message's kind, and the handshake's fields on a peer's first message.
KIND_FIELD = "type"
HOST_FIELD = "host"
NONCE_FIELD = "nonce"
MAC_FIELD = "mac"


T = TypeVar("T")


class Kind(Enum):
    CHALLENGE = "challenge"
    HELLO = "hello"
    WELCOME = "welcome"
    REJECT = "reject"
    READY = "ready"
    OUTCOME = "outcome"
    VERDICT = "verdict"
    RANK_STARTED = "rank_started"
    RANK_FAILURE = "rank_failure"
    ACK = "ack"


class Malformed(ValueError):
    """A JSON value that is not what a message's field holds."""


@dataclass(frozen=True)
class Challenge:
    KIND: ClassVar[Kind] = Kind.CHALLENGE
    nonce: str


@dataclass(frozen=True)
class Hello:
    """A worker host joining: the job's hosts as its resourceconfig.json lists them, and what its engine
    needs the master to know (MPI: the host key of the sshd mpirun will reach)."""

    KIND: ClassVar[Kind] = Kind.HELLO
    job_hosts: tuple[str, ...] = ()
    ssh_host_key: str = ""


@dataclass(frozen=True)
class Welcome:
    """The master accepting a worker, with what its engine needs the worker to know (MPI: the public key
    mpirun's ssh logs in with)."""

    KIND: ClassVar[Kind] = Kind.WELCOME
    ssh_client_key: str = ""


@dataclass(frozen=True)
class Reject:
    KIND: ClassVar[Kind] = Kind.REJECT
    reason: str


@dataclass(frozen=True)
class Ready:
    KIND: ClassVar[Kind] = Kind.READY


@dataclass(frozen=True)
class Outcome:
    """How a worker host's own program ended (the TF_CONFIG engines)."""

    KIND: ClassVar[Kind] = Kind.OUTCOME
    verdict: Verdict


@dataclass(frozen=True)
class JobVerdict:
    """The job's verdict, from the master to every worker host."""

    KIND: ClassVar[Kind] = Kind.VERDICT
    verdict: Verdict


@dataclass(frozen=True)
class RankStarted:
    """A rank launcher about to start its program."""

    KIND: ClassVar[Kind] = Kind.RANK_STARTED
    rank: int


@dataclass(frozen=True)
class RankFailed:
    """A rank launcher's account of its program's failure."""

    KIND: ClassVar[Kind] = Kind.RANK_FAILURE
    failure: RankFailure

    @property
    def rank(self) -> int:
        return self.failure.rank


@dataclass(frozen=True)
class Ack:
    KIND: ClassVar[Kind] = Kind.ACK


Message = Challenge | Hello | Welcome | Reject | Ready | Outcome | JobVerdict | RankStarted | RankFailed | Ack
_CLASSES: dict[Kind, type[Message]] = {
    cls.KIND: cls
    for cls in (Challenge, Hello, Welcome, Reject, Ready, Outcome, JobVerdict, RankStarted, RankFailed, Ack)
}


def encode(message: Message) -> dict[str, Any]:
    """The JSON object that carries ``message``."""
    return {KIND_FIELD: message.KIND.value, **_json_fields(message)}


def decode(fields: Mapping[str, Any]) -> Message | None:
    """The message a JSON object carries; None when it is none of them, or malformed. Pure."""
    try:
        kind = Kind(fields.get(KIND_FIELD))
    except ValueError:
        return None
    try:
        return _read_object(_CLASSES[kind], fields)
    except Malformed:
        return None


# Every field of a message is one of these, or a dataclass of them (Verdict, RankFailure): nested JSON.
def _json_fields(value: Any) -> dict[str, Any]:
    return {field.name: _json(getattr(value, field.name)) for field in dataclasses.fields(value)}


def _json(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return _json_fields(value)
    return list(value) if isinstance(value, tuple) else value


def _read_object(cls: type[T], fields: Mapping[str, Any]) -> T:
    """An instance of the dataclass ``cls`` from a JSON object: each field read as its type says; a missing
    field takes its default, or is malformed when it has none."""
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in fields:
            values[field.name] = _read(hints[field.name], fields[field.name])
        elif field.default is dataclasses.MISSING:
            raise Malformed(f"{field.name} is missing")
    return cls(**values)


def _read(hint: Any, value: Any) -> Any:
    if hint is str or hint is int:
        if not isinstance(value, hint) or isinstance(value, bool):
            raise Malformed(f"{value!r} is not {hint.__name__}")
        return value
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise Malformed(f"{value!r} is not a list of text")
        return tuple(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return _read_object(hint, value)
    raise Malformed(f"{value!r} is not a {hint}")
