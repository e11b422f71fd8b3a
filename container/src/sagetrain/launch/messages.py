"""The coordinator's messages between hosts (and from rank launchers): a kind each, a frozen dataclass each,
their JSON encoding and their limits. Every sender and reader uses this module; nothing else spells a
message's kind or fields.

On the wire a message is one JSON object on one line, its kind in the field ``type``. Every
connection starts with the handshake (handshake.py: a password-authenticated key exchange, SPAKE2,
over the peer host's key), after which every message carries a MAC (coordinator.py)::

    peer   → master   PakeStart(host, pake)              the handshake, before either side proved
    master → peer     PakeReply(pake, proof)             membership: nothing here lets anyone test a
    peer   → master   PakeProof(proof)                   guess of the key without talking to the job
    peer   → master   Hello | RankStarted | RankFailed   its first message, on the secured connection
    master → worker   Welcome(ssh_client_key)            or Reject(reason), and the connection closes
    worker → master   Ready()                            MPI: this host's sshd accepts the master's key
    worker → master   Outcome(verdict)                   TF_CONFIG: how this host's program ended
    master → worker   JobVerdict(verdict)                the job's end; the worker exits with it
    master → worker   SshTrust(known_hosts, authorized_keys)   SDK v3 MPI(): every host's public keys
    master → rank     Ack()                              a rank launcher's report arrived

A line longer than its limit (``HANDSHAKE_LINE_BYTES`` before the peer proved membership,
``MAX_MESSAGE_BYTES`` after), or one that does not decode to one of these, is not a message.
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
# The handshake's messages are a few hundred bytes: nothing more is read from a peer that has not proved
# membership (a host name is at most 255 characters, a SPAKE2 message 33 bytes in base64).
HANDSHAKE_LINE_BYTES = 1024
# The field naming a message's kind, and the MAC every message carries once the connection is secure.
KIND_FIELD = "type"
MAC_FIELD = "mac"


T = TypeVar("T")


class Kind(Enum):
    PAKE_START = "pake_start"
    PAKE_REPLY = "pake_reply"
    PAKE_PROOF = "pake_proof"
    HELLO = "hello"
    WELCOME = "welcome"
    REJECT = "reject"
    READY = "ready"
    OUTCOME = "outcome"
    VERDICT = "verdict"
    RANK_STARTED = "rank_started"
    RANK_FAILURE = "rank_failure"
    SSH_TRUST = "ssh_trust"
    ACK = "ack"


class Malformed(ValueError):
    """A JSON value that is not what a message's field holds."""


@dataclass(frozen=True)
class PakeStart:
    KIND: ClassVar[Kind] = Kind.PAKE_START
    host: str
    pake: str  # the peer's SPAKE2 message, base64


@dataclass(frozen=True)
class PakeReply:
    KIND: ClassVar[Kind] = Kind.PAKE_REPLY
    pake: str  # the master's SPAKE2 message, base64
    proof: str  # the master's key confirmation


@dataclass(frozen=True)
class PakeProof:
    KIND: ClassVar[Kind] = Kind.PAKE_PROOF
    proof: str  # the peer's key confirmation


@dataclass(frozen=True)
class Hello:
    """A worker host joining: the job's hosts as its resourceconfig.json lists them, and what its engine
    needs the master to know (MPI: the host key of the sshd mpirun will reach)."""

    KIND: ClassVar[Kind] = Kind.HELLO
    job_hosts: tuple[str, ...] = ()
    ssh_host_key: str = ""
    ssh_client_key: str = ""  # SDK v3 MPI(): the key this host's ssh logs in to the others with


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
class SshTrust:
    """For the SageMaker SDK v3's MPI driver: every host's public keys, as the files that hold them."""

    KIND: ClassVar[Kind] = Kind.SSH_TRUST
    known_hosts: str
    authorized_keys: str


@dataclass(frozen=True)
class Ack:
    KIND: ClassVar[Kind] = Kind.ACK


Message = (
    PakeStart
    | PakeReply
    | PakeProof
    | Hello
    | Welcome
    | Reject
    | Ready
    | Outcome
    | JobVerdict
    | RankStarted
    | RankFailed
    | SshTrust
    | Ack
)
_CLASSES: dict[Kind, type[Message]] = {
    cls.KIND: cls
    for cls in (
        PakeStart,
        PakeReply,
        PakeProof,
        Hello,
        Welcome,
        Reject,
        Ready,
        Outcome,
        JobVerdict,
        RankStarted,
        RankFailed,
        SshTrust,
        Ack,
    )
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


def _text(value: str) -> str:
    """``value``, text that can be written out again: JSON can carry lone surrogates (``"\\ud800"``),
    which no encoder takes."""
    try:
        value.encode()
    except UnicodeEncodeError:
        raise Malformed("text that is not Unicode") from None
    return value


def _read(hint: Any, value: Any) -> Any:
    if hint is str or hint is int:
        if not isinstance(value, hint) or isinstance(value, bool):
            raise Malformed(f"{value!r} is not {hint.__name__}")
        return _text(value) if isinstance(value, str) else value
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise Malformed(f"{value!r} is not a list of text")
        return tuple(_text(item) for item in value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return _read_object(hint, value)
    raise Malformed(f"{value!r} is not a {hint}")
