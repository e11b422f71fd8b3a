"""The coordinator's messages: each kind round-trips through its JSON encoding, and anything else a peer
may send (an unknown kind, a missing or mistyped field) decodes to nothing, never to an exception."""

import json

import pytest
from sagetrain.launch.messages import (
    KIND_FIELD,
    Ack,
    Challenge,
    Hello,
    JobVerdict,
    Kind,
    Outcome,
    RankFailed,
    RankStarted,
    Ready,
    Reject,
    Welcome,
    decode,
    encode,
)
from sagetrain.report.verdict import RankFailure, Verdict

EVERY_KIND = [
    Challenge("ab" * 16),
    Hello(("algo-1", "algo-2"), "ssh-ed25519 AAAA host"),
    Welcome("ssh-ed25519 AAAA client"),
    Reject("host algo-3 joined twice"),
    Ready(),
    Outcome(Verdict(1, "train.py exited with code 1", "Traceback…")),
    JobVerdict(Verdict(0)),
    RankStarted(3),
    RankFailed(RankFailure(3, "algo-2", 137, "train.py", "", "", ("killed",))),
    Ack(),
]


def test_every_kind_has_one_message_class_here():
    assert sorted(message.KIND.value for message in EVERY_KIND) == sorted(kind.value for kind in Kind)


@pytest.mark.parametrize("message", EVERY_KIND, ids=lambda message: message.KIND.value)
def test_each_message_round_trips_through_json(message):
    fields = encode(message)
    assert fields[KIND_FIELD] == message.KIND.value
    assert decode(json.loads(json.dumps(fields))) == message


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {KIND_FIELD: "shutdown"},
        {KIND_FIELD: ["hello"]},
        {KIND_FIELD: "challenge"},  # no nonce
        {KIND_FIELD: "challenge", "nonce": 7},
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


def test_fields_a_message_does_not_have_are_ignored():
    # A peer's first message also carries the handshake's own fields (host, nonce, mac).
    assert decode({KIND_FIELD: "rank_started", "rank": 1, "host": "algo-2", "nonce": "n"}) == RankStarted(1)
