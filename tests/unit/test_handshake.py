"""The coordinator's handshake against a dictionary attacker who knows everything about the job but the one
value that makes its key (the job name, say): whatever it captures before the other side has proved
membership, as an impostor master, an impostor worker or a relay between the two, lets it check at most the
one guess it committed to on that connection, never its dictionary offline. The ssh keys of the SDK's MPI
path are random, so they give nothing to guess against either."""

import base64

import pytest
from sagetrain.config.job_secret import Membership
from sagetrain.launch.coordinator.trust import (
    HandshakeFailed,
    MasterSide,
    PeerSide,
    SessionKeys,
    start_problem,
)
from sagetrain.launch.coordinator.wire import PakeProof, PakeReply, PakeStart
from spake2 import SPAKE2_B
from spake2.parameters.ed25519 import ParamsEd25519 as DefaultParams
from spake2.spake2 import SPAKEError, finalize_SPAKE2

HOST = "algo-2"
# The attacker's dictionary: the job's description with each candidate job name. One is right.
DICTIONARY = [f"job-{n:04d}" for n in range(200)]
TRUE_NAME = DICTIONARY[137]


def host_key(job_name: str) -> bytes:
    """The key a host proves itself with, for the job of that name (how config/job_secret.py derives it)."""
    import hashlib
    import hmac

    job_key = hmac.new(b"the rest of the job's description", job_name.encode(), hashlib.sha256).digest()
    return Membership(job_key).host_key(HOST)


TRUE_KEY = host_key(TRUE_NAME)


def pake(text: str) -> bytes:
    return base64.b64decode(text)


def confirmations(start: PakeStart, reply_pake: str, shared: bytes) -> SessionKeys:
    return SessionKeys.of(shared, start, reply_pake)


def test_what_a_worker_sends_first_carries_nothing_a_dictionary_can_be_checked_against():
    worker = PeerSide(HOST, TRUE_KEY)
    start = worker.start()
    assert set(vars(start)) == {"host", "pake"}  # the host's name, and a SPAKE2 message: no proof, no MAC
    # It is no function of the key alone: the same key gives another message each time.
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


def offline_matches(guess: str, exponent_entropy: bytes) -> list[str]:
    """An impostor worker that committed to ``guess`` and knows its own SPAKE2 exponent (the most it can
    know) gets the master's reply and proof, then checks the whole dictionary offline: for each candidate
    it derives the shared key as it would have with that candidate (its exponent, the master's message
    unblinded by the candidate) and compares the master's proof. The candidates that match."""
    attacker = SPAKE2_B(
        host_key(guess), idA=b"master", idB=HOST.encode(), entropy_f=lambda n: exponent_entropy[:n]
    )
    start = PakeStart(HOST, base64.b64encode(attacker.start()).decode())
    reply = MasterSide(start, TRUE_KEY).reply  # the master proves first: this is what the attacker holds
    group, master_blinding = DefaultParams.group, DefaultParams.M
    master_message, own_message = pake(reply.pake)[1:], pake(start.pake)[1:]  # without spake2's side byte
    matches = []
    for name in DICTIONARY:
        unblinded = group.bytes_to_element(master_message).add(
            master_blinding.scalarmult(-group.password_to_scalar(host_key(name)))
        )
        shared = finalize_SPAKE2(
            b"master", HOST.encode(), master_message, own_message,
            unblinded.scalarmult(attacker.xy_scalar).to_bytes(), host_key(name),
        )  # fmt: skip
        if confirmations(start, reply.pake, shared).master_proof == reply.proof:
            matches.append(name)
    return matches


def test_an_impostor_worker_can_check_only_the_guess_its_first_message_committed_to():
    entropy = bytes(range(64))
    # The check works: committed to the right name, the attacker recognises it (and only it).
    assert offline_matches(TRUE_NAME, entropy) == [TRUE_NAME]
    # Committed to a wrong name, no candidate matches, the right one included: its message fixed its
    # exponent and its guess together, and the master's proof answers that pair only.
    assert offline_matches(DICTIONARY[3], entropy) == []
    with pytest.raises(HandshakeFailed):
        master = MasterSide(PeerSide(HOST, host_key(DICTIONARY[3])).start(), TRUE_KEY)
        master.finish(PakeProof("00" * 32))


def test_a_relay_between_the_real_worker_and_master_passes_the_handshake_on_and_learns_its_outcome_only():
    worker = PeerSide(HOST, TRUE_KEY)
    start = worker.start()
    master = MasterSide(start, TRUE_KEY)  # the relay passes the master's real reply on
    proof, session = worker.finish(master.reply)
    assert master.finish(proof) == session
    # Nothing it carries is the session key: the messages after the handshake are MACed under a key that
    # never crossed the wire.
    assert all(
        session.hex() not in text for text in (start.pake, master.reply.pake, master.reply.proof, proof.proof)
    )
    # What the relay holds (both SPAKE2 messages and both proofs) checks a candidate only with an exponent
    # the worker or the master drew and never sent: SPAKE2's security, which no test here can show; what
    # a test can show is the impostor's case above, where the exponent is the attacker's own.


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


@pytest.mark.parametrize(
    ("start", "problem"),
    [
        (PakeStart("", "QUJD"), "a host name that is empty or longer than 255 characters"),
        (PakeStart("a" * 256, "QUJD"), "a host name that is empty or longer than 255 characters"),
        (PakeStart(HOST, "not base64!"), "a SPAKE2 message that is not base64"),
        (PakeStart(HOST, "é"), "a SPAKE2 message that is not base64"),
        (PakeStart(HOST, "QUJD"), "a SPAKE2 message that is not a peer's (its length, or its side)"),
        (
            PakeStart(HOST, base64.b64encode(b"A" + bytes(32)).decode()),
            "a SPAKE2 message that is not a peer's",
        ),
        (
            PakeStart(HOST, base64.b64encode(b"X" + bytes(32)).decode()),
            "a SPAKE2 message that is not a peer's",
        ),
    ],
)
def test_a_start_that_is_no_peers_spake2_message_is_told_without_spake2_work(start, problem):
    assert (start_problem(start) or "").startswith(problem)


def test_a_real_peers_start_has_no_problem():
    assert start_problem(PeerSide(HOST, TRUE_KEY).start()) is None
