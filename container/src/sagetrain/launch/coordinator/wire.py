"""What crosses a coordinator connection: the messages (a kind each, a frozen dataclass each), their JSON
encoding and limits, and the ``Connection`` that frames them one JSON object per line and, once secure,
proves each with a MAC. Every sender and reader uses this module; nothing else spells a message's kind
or fields.

Every connection starts with the handshake (trust.py: a password-authenticated key exchange, SPAKE2,
over the peer host's key), after which every message carries a MAC over its direction and sequence
number, so no message can be replayed, reordered or forged::

    peer   → master   PakeStart(host, pake)              the handshake, before either side proved
    master → peer     PakeReply(pake, proof)             membership: nothing here lets anyone test a
    peer   → master   PakeProof(proof)                   guess of the key without talking to the job;
                      or PakeRefused()                   the master's proof is not under the peer's key
    peer   → master   Hello | RankStarted | RankFailed   its first message, on the secured connection
    master → worker   Welcome(ssh_client_key)            or Reject(reason), and the connection closes
    master → worker   Members(addresses)                 every host has joined: whom the job's ports take
    worker → master   Ready()                            MPI: this host's sshd accepts the master's key
    worker → master   Outcome(verdict)                   TF_CONFIG: how this host's program ended
    master → worker   JobVerdict(verdict)                the job's end; the worker exits with it
    master → rank     Ack()                              a rank launcher's report arrived

A use of the coordinator with messages of its own (the SageMaker SDK's key exchange, sdk/ssh.py) reads
them through an extended ``Catalogue``: ``CORE.extended(...)``; a join message of its own is a ``Hello``
subclass. A line longer than its limit (``HANDSHAKE_LINE_BYTES`` before the peer proved membership,
``MAX_MESSAGE_BYTES`` after), or one that does not decode to a message of the connection's catalogue, is
not a message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import socket
import threading
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Protocol, TypeVar

from sagetrain.contracts import canonical_json
from sagetrain.deadline import Deadline
from sagetrain.report.verdict import RankFailure, Verdict

log = logging.getLogger(__name__)

# A verdict's detail (traceback, last lines) is the largest message; a longer line is not ours.
MAX_MESSAGE_BYTES = 1 << 20
# The handshake's messages are a few hundred bytes: nothing more is read from a peer that has not proved
# membership (a host name is at most 255 characters, a SPAKE2 message 33 bytes in base64).
HANDSHAKE_LINE_BYTES = 1024
# The field naming a message's kind, and the MAC every message carries once the connection is secure.
KIND_FIELD = "type"
MAC_FIELD = "mac"
# How much of a peer's own text (a claimed host name, a host list) our log lines and messages quote.
QUOTED_CHARACTERS = 200


T = TypeVar("T")


class Kind(Enum):
    PAKE_START = "pake_start"
    PAKE_REPLY = "pake_reply"
    PAKE_PROOF = "pake_proof"
    PAKE_REFUSED = "pake_refused"
    HELLO = "hello"
    WELCOME = "welcome"
    REJECT = "reject"
    MEMBERS = "members"
    READY = "ready"
    OUTCOME = "outcome"
    VERDICT = "verdict"
    RANK_STARTED = "rank_started"
    RANK_FAILURE = "rank_failure"
    ACK = "ack"


class WireMessage(Protocol):
    """What a connection carries: a frozen dataclass whose kind (a member of ``Kind``, or of an
    extension's own enum) names it on the wire."""

    @property
    def KIND(self) -> Enum: ...


class Malformed(ValueError):
    """A JSON value that is not what a message's field holds."""


@dataclass(frozen=True)
class PakeStart:
    KIND: ClassVar[Enum] = Kind.PAKE_START
    host: str
    pake: str  # the peer's SPAKE2 message, base64


@dataclass(frozen=True)
class PakeReply:
    KIND: ClassVar[Enum] = Kind.PAKE_REPLY
    pake: str  # the master's SPAKE2 message, base64
    proof: str  # the master's key confirmation


@dataclass(frozen=True)
class PakeProof:
    KIND: ClassVar[Enum] = Kind.PAKE_PROOF
    proof: str  # the peer's key confirmation


@dataclass(frozen=True)
class PakeRefused:
    """A peer's answer to a master whose proof does not hold under the peer's key: it tells the master no
    more than closing would (that key is not the master's), but says so, so that a master whose host
    differs from its worker in what the key derives from can say so at once (trust.py)."""

    KIND: ClassVar[Enum] = Kind.PAKE_REFUSED


@dataclass(frozen=True)
class Hello:
    """A worker host joining: the job's hosts as its resourceconfig.json lists them, and what its engine
    needs the master to know (MPI: the host key of the sshd mpirun will reach)."""

    KIND: ClassVar[Enum] = Kind.HELLO
    job_hosts: tuple[str, ...] = ()
    ssh_host_key: str = ""


@dataclass(frozen=True)
class Welcome:
    """The master accepting a worker, with what its engine needs the worker to know (MPI: the public key
    mpirun's ssh logs in with)."""

    KIND: ClassVar[Enum] = Kind.WELCOME
    ssh_client_key: str = ""


@dataclass(frozen=True)
class Reject:
    KIND: ClassVar[Enum] = Kind.REJECT
    reason: str


@dataclass(frozen=True)
class Members:
    """The addresses the job's hosts proved membership from, as the master met them (and its own, as they
    reached it): the only peers, besides loopback, the job's ports take connections from
    (launch/members.py)."""

    KIND: ClassVar[Enum] = Kind.MEMBERS
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class Ready:
    KIND: ClassVar[Enum] = Kind.READY


@dataclass(frozen=True)
class Outcome:
    """How a worker host's own program ended (the TF_CONFIG engines)."""

    KIND: ClassVar[Enum] = Kind.OUTCOME
    verdict: Verdict


@dataclass(frozen=True)
class JobVerdict:
    """The job's verdict, from the master to every worker host."""

    KIND: ClassVar[Enum] = Kind.VERDICT
    verdict: Verdict


@dataclass(frozen=True)
class RankStarted:
    """A rank launcher about to start its program."""

    KIND: ClassVar[Enum] = Kind.RANK_STARTED
    rank: int


@dataclass(frozen=True)
class RankFailed:
    """A rank launcher's account of its program's failure."""

    KIND: ClassVar[Enum] = Kind.RANK_FAILURE
    failure: RankFailure

    @property
    def rank(self) -> int:
        return self.failure.rank


@dataclass(frozen=True)
class Ack:
    KIND: ClassVar[Enum] = Kind.ACK


# Every core message, listed once: the core catalogue is read from this union.
Message = (
    PakeStart | PakeReply | PakeProof | PakeRefused | Hello | Welcome | Reject | Members | Ready | Outcome
    | JobVerdict | RankStarted | RankFailed | Ack
)  # fmt: skip


@dataclass(frozen=True)
class Catalogue:
    """The message classes a connection reads, by the kind each names on the wire."""

    classes: Mapping[str, type[Any]]

    @classmethod
    def of(cls, *classes: type[Any]) -> Catalogue:
        return cls({}).extended(*classes)

    def extended(self, *classes: type[Any]) -> Catalogue:
        """This catalogue and ``classes``, each of a kind it does not read yet."""
        known = dict(self.classes)
        for message_class in classes:
            kind = message_class.KIND.value
            if kind in known:
                raise ValueError(f"two message classes of kind {kind!r}")
            known[kind] = message_class
        return Catalogue(known)

    def decode(self, fields: Mapping[str, Any]) -> WireMessage | None:
        """The message a JSON object carries; None when it is none of this catalogue's, or malformed. Pure."""
        kind = fields.get(KIND_FIELD)
        message_class = self.classes.get(kind) if isinstance(kind, str) else None
        if message_class is None:
            return None
        try:
            message: WireMessage = _read_object(message_class, fields)
        except Malformed:
            return None
        return message


CORE = Catalogue.of(*typing.get_args(Message))


def encode(message: WireMessage) -> dict[str, Any]:
    """The JSON object that carries ``message``."""
    return {KIND_FIELD: message.KIND.value, **_json_fields(message)}


def decode(fields: Mapping[str, Any], catalogue: Catalogue = CORE) -> WireMessage | None:
    """The message a JSON object carries; None when it is none of ``catalogue``'s, or malformed. Pure."""
    return catalogue.decode(fields)


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


def mac(key: bytes, *parts: bytes) -> str:
    return hmac.new(key, b"\x00".join(parts), hashlib.sha256).hexdigest()


def verified(key: bytes, expected: str, *parts: bytes) -> bool:
    return same_digest(mac(key, *parts), expected)


def same_digest(ours: str, theirs: str) -> bool:
    """Whether a peer's hex digest is ours, in constant time; a peer's text of any characters is simply
    not ours (hmac.compare_digest refuses text that is not ASCII)."""
    return hmac.compare_digest(ours.encode(), theirs.encode("utf-8", "surrogatepass"))


def enable_keepalive(sock: socket.socket) -> None:
    """TCP keepalive (about 5 s): a peer that vanished without closing its socket ends the connection."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


def quoted(value: Any) -> str:
    """A peer's text as our lines show it: in quotes, on one line, cut short, so it cannot pass for
    our own words or forge a line of the log."""
    text = value if isinstance(value, str) else repr(value)
    text = "".join(character if character.isprintable() else " " for character in text)
    return '"' + (text if len(text) <= QUOTED_CHARACTERS else text[:QUOTED_CHARACTERS] + "…") + '"'


class Connection:
    """A socket carrying messages, one JSON object per line; once ``secure``, every message carries and
    must carry a MAC over its direction and sequence number. Sending is safe from several threads; one
    thread reads. It reads the messages of ``catalogue``."""

    def __init__(self, sock: socket.socket, catalogue: Catalogue = CORE) -> None:
        self.sock = sock
        self._catalogue = catalogue
        self._buffer = bytearray()
        self._send_lock = threading.Lock()
        self._key: bytes | None = None
        self._outgoing, self._incoming = b"", b""
        self._sent = self._received = 0

    def secure(self, key: bytes, *, outgoing: bytes, incoming: bytes) -> None:
        self._key, self._outgoing, self._incoming = key, outgoing, incoming

    def send(self, message: WireMessage) -> None:
        fields = encode(message)
        with self._send_lock:
            if self._key is not None:
                count = str(self._sent).encode()
                fields = {**fields, MAC_FIELD: mac(self._key, self._outgoing, count, canonical_json(fields))}
                self._sent += 1
            self.sock.sendall(canonical_json(fields) + b"\n")

    def receive(self, deadline: Deadline | None = None) -> WireMessage | None:
        """The next message; None when the peer closed the connection, it broke, ``deadline`` passed, or
        the peer sent something that is not a message of this job (too long; once secure, without the
        right MAC): an impostor's message is as good as a closed connection. Before the connection is
        secure a message may be at most ``HANDSHAKE_LINE_BYTES`` long."""
        limit = MAX_MESSAGE_BYTES if self._key is not None else HANDSHAKE_LINE_BYTES
        line = self._read_line(limit, deadline)
        if line is None:
            return None
        try:
            fields = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than json can read
            return None
        if not isinstance(fields, dict):
            return None
        if self._key is not None and not self._verified(fields):
            log.warning("dropped a coordinator connection: a message did not carry this job's proof")
            return None
        return self._catalogue.decode(fields)

    def _verified(self, fields: dict[str, Any]) -> bool:
        assert self._key is not None
        claimed = str(fields.pop(MAC_FIELD, ""))
        count = str(self._received).encode()
        if not verified(self._key, claimed, self._incoming, count, canonical_json(fields)):
            return False
        self._received += 1
        return True

    def _read_line(self, limit: int, deadline: Deadline | None) -> bytes | None:
        """One line without its newline, read as it arrives: None past ``limit`` bytes, past
        ``deadline`` (for the whole line, however slowly it comes), or when the connection ends."""
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > limit:
                return None
            try:
                self.sock.settimeout(None if deadline is None else max(deadline.remaining(), 0.001))
                chunk = self.sock.recv(min(65536, limit + 1 - len(self._buffer)))
            except OSError:  # timed out, reset, closed under us
                return None
            if not chunk:
                return None
            self._buffer += chunk
        if end > limit:
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
