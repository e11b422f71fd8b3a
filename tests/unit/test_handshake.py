"""The coordinator's handshake against a dictionary attacker who knows everything about the job but the one
value that makes its key (the job name, say): whatever it captures before the other side has proved
membership, as an impostor master, an impostor worker or a relay between the two, lets it check at most the
one guess it committed to on that connection, never its dictionary offline. The ssh keys of the SDK's MPI
path are random, so they give nothing to guess against either."""

import base64

import pytest
from sagetrain.launch.handshake import HandshakeFailed, MasterSide, PeerSide, SessionKeys
from sagetrain.launch.membership import Membership
from sagetrain.launch.messages import PakeProof, PakeReply, PakeStart
from spake2 import SPAKE2_A, SPAKE2_B
from spake2.ed25519_basic import NotOnCurve
from spake2.parameters.ed25519 import ParamsEd25519 as DefaultParams
from spake2.spake2 import SPAKEError

HOST = "algo-2"
# The attacker's dictionary: the job's description with each candidate job name. One is right.
DICTIONARY = [f"job-{n:04d}" for n in range(200)]
TRUE_NAME = DICTIONARY[137]


def host_key(job_name: str) -> bytes:
    """The key a host proves itself with, for the job of that name (how membership.py derives it)."""
    import hashlib
    import hmac

    job_key = hmac.new(b"the rest of the job's description", job_name.encode(), hashlib.sha256).digest()
    return Membership(job_key).host_key(HOST)


TRUE_KEY = host_key(TRUE_NAME)


def pake(text: str) -> bytes:
    return base64.b64decode(text)


def confirmations(start: PakeStart, reply_pake: str, shared: bytes) -> SessionKeys:
    return SessionKeys.of(shared, start, reply_pake)


def candidates_consistent_with(start: PakeStart) -> list[str]:
    """What an impostor that took the master's name can do offline with the worker's first message: take
    each candidate's blinding off it (X* - pw·M, as SPAKE2's master side does) and keep the candidates
    that leave a valid group element. The worker sends nothing else until the master proves itself."""
    group, blinding = DefaultParams.group, DefaultParams.M
    message = pake(start.pake)[1:]  # after spake2's side byte
    consistent = []
    for name in DICTIONARY:
        unblinded = group.bytes_to_element(message).add(
            blinding.scalarmult(-group.password_to_scalar(host_key(name)))
        )
        try:
            group.bytes_to_element(unblinded.to_bytes())
        except (NotOnCurve, ValueError):
            continue
        consistent.append(name)
    return consistent


def test_what_a_worker_sends_first_carries_nothing_a_dictionary_can_be_checked_against():
    worker = PeerSide(HOST, TRUE_KEY)
    start = worker.start()
    assert set(vars(start)) == {"host", "pake"}  # the host's name, and a SPAKE2 message: no proof, no MAC
    # Every candidate explains it equally well: a random group element, blinded, is a random group element.
    assert candidates_consistent_with(start) == DICTIONARY
    # And it is no function of the key: the same key gives another message each time.
    assert PeerSide(HOST, TRUE_KEY).start().pake != start.pake


def test_an_impostor_master_gets_one_guess_per_connection_and_the_worker_says_nothing_more():
    for guess in (DICTIONARY[0], DICTIONARY[1]):  # wrong guesses, one connection each
        worker = PeerSide(HOST, TRUE_KEY)
        impostor = MasterSide(worker.start(), host_key(guess))
        with pytest.raises(HandshakeFailed, match="did not prove membership"):
            worker.finish(impostor.reply)  # the worker stops here: no PakeProof, no Hello
    # The one guess a connection commits to is the only one it checks: the right one is found only when
    # guessed on that connection, as anyone could by connecting with it.
    worker = PeerSide(HOST, TRUE_KEY)
    impostor = MasterSide(worker.start(), host_key(TRUE_NAME))
    proof, session = worker.finish(impostor.reply)
    assert impostor.finish(proof) == session


def test_an_impostor_worker_can_check_only_the_guess_its_first_message_committed_to():
    guess = DICTIONARY[3]
    attacker = SPAKE2_B(host_key(guess), idA=b"master", idB=HOST.encode())
    start = PakeStart(HOST, base64.b64encode(attacker.start()).decode())
    master = MasterSide(start, TRUE_KEY)
    reply = master.reply  # the master's proof comes before the peer's: this is what the attacker holds
    # Its own guess: checkable, and wrong.
    mine = confirmations(start, reply.pake, attacker.finish(pake(reply.pake)))
    assert mine.master_proof != reply.proof
    # Every other candidate, the right one included: the attacker's message fixed its exponent and its
    # guess together; a fresh exponent for another candidate makes another message, not this one.
    matches = []
    for name in DICTIONARY:
        other = SPAKE2_B(host_key(name), idA=b"master", idB=HOST.encode())
        other.start()
        keys = confirmations(start, reply.pake, other.finish(pake(reply.pake)))
        if keys.master_proof == reply.proof:
            matches.append(name)
    assert matches == []
    with pytest.raises(HandshakeFailed):
        master.finish(PakeProof(mine.peer_proof))


def test_a_relay_between_the_real_worker_and_master_holds_a_transcript_no_candidate_explains():
    worker = PeerSide(HOST, TRUE_KEY)
    start = worker.start()
    master = MasterSide(start, TRUE_KEY)  # the relay passes the master's real reply on
    proof, session = worker.finish(master.reply)
    assert master.finish(proof) == session
    transcript = (start, master.reply, proof)
    # Offline, with every candidate and fresh SPAKE2 states on either side, the relay reproduces neither
    # proof: both need an exponent only the worker or the master ever held.
    for name in DICTIONARY:
        for side in (SPAKE2_A(host_key(name), idA=b"master", idB=HOST.encode()),
                     SPAKE2_B(host_key(name), idA=b"master", idB=HOST.encode())):  # fmt: skip
            side.start()
            other = pake(transcript[1].pake) if isinstance(side, SPAKE2_B) else pake(start.pake)
            keys = confirmations(start, transcript[1].pake, side.finish(other))
            assert keys.master_proof != transcript[1].proof
            assert keys.peer_proof != transcript[2].proof


@pytest.mark.parametrize(
    "reply",
    [
        None,
        PakeReply("not base64!", "00"),
        PakeReply(base64.b64encode(b"\x00" * 33).decode(), "00"),
        PakeReply(base64.b64encode(b"short").decode(), "00"),
        PakeProof("00"),
    ],
)
def test_a_reply_that_is_not_a_spake2_message_fails_the_handshake_and_nothing_else(reply):
    with pytest.raises(HandshakeFailed):
        PeerSide(HOST, TRUE_KEY).finish(reply)


@pytest.mark.parametrize("pake_text", ["", "!!", base64.b64encode(b"\x01" * 33).decode(), "A" * 2000])
def test_a_first_message_that_is_not_a_spake2_message_fails_the_handshake(pake_text):
    with pytest.raises(HandshakeFailed):
        MasterSide(PakeStart(HOST, pake_text), TRUE_KEY)


def test_spake2_itself_refuses_a_reflected_message():
    # The master answering a peer with the peer's own message (a reflection) is no shortcut either.
    side = SPAKE2_B(TRUE_KEY, idA=b"master", idB=HOST.encode())
    message = side.start()
    with pytest.raises((SPAKEError, ValueError)):
        side.finish(message)
