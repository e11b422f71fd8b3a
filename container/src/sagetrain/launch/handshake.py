"""How a peer and the master prove to each other that they belong to the job, without letting anyone who
does not test a guess of the key offline.

The key each host proves itself with (membership.py) may be guessable: without a secret it derives from
the job's description. So no value a host sends before the other side has proved membership may be
checkable against a guess. A password-authenticated key exchange gives exactly that: SPAKE2 (the
``spake2`` package, Ed25519 group) over the peer host's key, the master as side A, the host as side B,
both named in the exchange::

    peer   → master   PakeStart(host, X)          X: the peer's SPAKE2 message
    master → peer     PakeReply(Y, proof_master)  Y: the master's; proof: a MAC under the shared key
    peer   → master   PakeProof(proof_peer)

X and Y are random group elements whatever the key; the shared key K needs one side's key and secret
exponent. Someone without the key who answers as the master (or connects as a peer) commits to one guess
in the message it sends, and learns from the other side's proof only whether that one guess was right:
each attempt online tests one guess, and the master limits failed attempts per peer (admission.py).
The master proves first; a peer that sees a wrong proof sends nothing more. From K both sides derive
the connection's session key, with which every later message carries a MAC (coordinator.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from spake2 import SPAKE2_A, SPAKE2_B
from spake2.ed25519_basic import NotOnCurve
from spake2.spake2 import SPAKEError

from sagetrain.launch.membership import canonical, same_digest
from sagetrain.launch.messages import PakeProof, PakeReply, PakeStart

MASTER_ID = b"master"
# What spake2 raises for a message that is not one of the other side's group elements.
_NOT_A_SPAKE2_MESSAGE = (SPAKEError, NotOnCurve, ValueError, TypeError, IndexError)


class HandshakeFailed(Exception):
    """The other side did not prove membership of the job (or did not follow the handshake)."""


@dataclass(frozen=True)
class SessionKeys:
    """What both sides derive from SPAKE2's shared key and the exchange's transcript."""

    master_proof: str
    peer_proof: str
    session: bytes

    def __repr__(self) -> str:
        return "SessionKeys(<hidden>)"

    @classmethod
    def of(cls, shared: bytes, start: PakeStart, master_pake: str) -> SessionKeys:
        transcript = canonical({"host": start.host, "peer": start.pake, "master": master_pake})

        def derive(label: bytes) -> bytes:
            return hmac.new(shared, label + b"\x00" + transcript, hashlib.sha256).digest()

        return cls(derive(b"master proof").hex(), derive(b"peer proof").hex(), derive(b"session"))


def _element(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HandshakeFailed("a SPAKE2 message that is not base64") from None


def _encoded(element: bytes) -> str:
    return base64.b64encode(element).decode("ascii")


class PeerSide:
    """A host's side: ``start`` gives its first message, ``finish`` checks the master's reply and gives
    the proof to send and the session key."""

    def __init__(self, host: str, host_key: bytes) -> None:
        self._spake = SPAKE2_B(host_key, idA=MASTER_ID, idB=host.encode())
        self._start = PakeStart(host, _encoded(self._spake.start()))

    def start(self) -> PakeStart:
        return self._start

    def finish(self, reply: object) -> tuple[PakeProof, bytes]:
        if not isinstance(reply, PakeReply):
            raise HandshakeFailed("the master did not answer the handshake")
        try:
            shared = self._spake.finish(_element(reply.pake))
        except _NOT_A_SPAKE2_MESSAGE:
            raise HandshakeFailed("the master's SPAKE2 message is not valid") from None
        keys = SessionKeys.of(shared, self._start, reply.pake)
        if not same_digest(keys.master_proof, reply.proof):
            raise HandshakeFailed("the master did not prove membership of the job")
        return PakeProof(keys.peer_proof), keys.session


class MasterSide:
    """The master's side for one peer's ``PakeStart``: ``reply`` to send, then ``finish`` with the peer's
    proof gives the session key."""

    def __init__(self, start: PakeStart, host_key: bytes) -> None:
        spake = SPAKE2_A(host_key, idA=MASTER_ID, idB=start.host.encode())
        pake = _encoded(spake.start())
        try:
            shared = spake.finish(_element(start.pake))
        except _NOT_A_SPAKE2_MESSAGE:
            raise HandshakeFailed("the peer's SPAKE2 message is not valid") from None
        self._keys = SessionKeys.of(shared, start, pake)
        self.reply = PakeReply(pake, self._keys.master_proof)

    def finish(self, proof: object) -> bytes:
        if not isinstance(proof, PakeProof) or not same_digest(self._keys.peer_proof, proof.proof):
            raise HandshakeFailed("the peer did not prove membership of the job")
        return self._keys.session
