"""The coordinator's messages: each kind round-trips through its JSON encoding, and anything else a peer
may send (an unknown kind, a missing or mistyped field) decodes to nothing, never to an exception."""

import json

import pytest
from sagetrain.launch.coordinator.wire import (
    KIND_FIELD,
    Ack,
    Hello,
    JobVerdict,
    Kind,
    Members,
    Outcome,
    PakeProof,
    PakeRefused,
    PakeReply,
    PakeStart,
    RankFailed,
    RankStarted,
    Ready,
    Reject,
    Welcome,
    decode,
    encode,
)
from sagetrain.report.verdict import RankFailure, Verdict
from sagetrain.sdk.ssh import SSH_MESSAGES, SshHello, SshKind, SshTrust

EVERY_KIND = [
    PakeStart("algo-2", "QUJD"),
    PakeReply("REVG", "ab" * 32),
    PakeProof("cd" * 32),
    PakeRefused(),
    Hello(("algo-1", "algo-2"), "ssh-ed25519 AAAA host"),
    Welcome("ssh-ed25519 AAAA client"),
    Reject("host algo-3 joined twice"),
    Members(("10.0.0.5", "10.0.0.6")),
    Ready(),
    Outcome(Verdict(1, "train.py exited with code 1", "Traceback…")),
    JobVerdict(Verdict(0)),
    RankStarted(3),
    RankFailed(RankFailure(3, "algo-2", 137, "train.py", "", "", ("killed",))),
    Ack(),
]
# The SageMaker SDK's key exchange: its own kinds, read only on its connections.
EVERY_SSH_KIND = [
    SshHello(("algo-1", "algo-2"), "ssh-ed25519 AAAA host", "ssh-ed25519 AAAA client"),
    SshTrust("algo-1 ssh-ed25519 AAAA\n", "ssh-ed25519 AAAA client\n", ("10.0.0.5", "10.0.0.6")),
]


def test_every_kind_has_one_message_class_here():
    assert sorted(message.KIND.value for message in EVERY_KIND) == sorted(kind.value for kind in Kind)
    assert sorted(message.KIND.value for message in EVERY_SSH_KIND) == sorted(kind.value for kind in SshKind)


@pytest.mark.parametrize("message", EVERY_KIND + EVERY_SSH_KIND, ids=lambda message: message.KIND.value)
def test_each_message_round_trips_through_json(message):
    fields = encode(message)
    assert fields[KIND_FIELD] == message.KIND.value
    assert decode(json.loads(json.dumps(fields)), SSH_MESSAGES) == message
    if message in EVERY_KIND:
        assert decode(json.loads(json.dumps(fields))) == message


@pytest.mark.parametrize("message", EVERY_SSH_KIND, ids=lambda message: message.KIND.value)
def test_the_key_exchange_kinds_are_nothing_on_the_coordinators_other_connections(message):
    assert decode(encode(message)) is None


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {KIND_FIELD: "shutdown"},
        {KIND_FIELD: ["hello"]},
        {KIND_FIELD: "pake_start", "host": "algo-2"},  # no SPAKE2 message
        {KIND_FIELD: "pake_start", "host": 7, "pake": "QUJD"},
        {KIND_FIELD: "pake_reply", "pake": "QUJD", "proof": None},
        {KIND_FIELD: "ssh_trust", "known_hosts": ["algo-1"], "authorized_keys": ""},
        {KIND_FIELD: "hello", "job_hosts": "algo-1"},
        {KIND_FIELD: "hello", "job_hosts": ["algo-1", 2]},
        {KIND_FIELD: "rank_started", "rank": "0"},
        {KIND_FIELD: "rank_started", "rank": True},
        {KIND_FIELD: "outcome", "verdict": 0},
        {KIND_FIELD: "outcome", "verdict": {"exit_code": "0"}},
        {KIND_FIELD: "verdict", "verdict": {"cause": "no exit code"}},
        {KIND_FIELD: "rank_failure", "rank": 0, "exit_code": 1},  # no host
        {KIND_FIELD: "rank_failure", "rank": 0, "host": "algo-1", "exit_code": 1, "last_lines": [None]},
    ],
)
def test_what_is_not_one_of_the_messages_decodes_to_nothing(fields):
    assert decode(fields) is None
    assert decode(fields, SSH_MESSAGES) is None


def test_fields_a_message_does_not_have_are_ignored():
    # A message on a secured connection also carries its MAC.
    assert decode({KIND_FIELD: "rank_started", "rank": 1, "mac": "00"}) == RankStarted(1)
