"""What ranks tell each other after preparing, and the error every rank raises when one failed: literals,
no TensorFlow."""

import json
import pickle
import pickletools

import pytest
from sagetrain.contracts import RankPlace
from sagetrain.errors import ExitCode, PlatformError, UserError
from sagetrain.trainer.agreement import (
    RankFailure,
    RankOutcome,
    agree,
    first_failure,
    records_per_rank,
)

PREPARED = RankOutcome(records={"train": 600, "validation": 100})
USER_FAILURE = RankFailure(
    int(ExitCode.USER_ERROR), "channel 'train' has no files in /opt/ml/input/data/train."
)


class Gathered:
    """A collective of ``len(values)`` ranks whose allgather returns ``values`` with ``mine`` at this rank's
    place, as the engines' allgather does."""

    def __init__(self, rank, values):
        self.ranks = RankPlace(rank=rank, size=len(values))
        self.values = values

    def allgather_object(self, mine):
        return [mine if rank == self.ranks.rank else value for rank, value in enumerate(self.values)]


def test_an_outcome_crosses_ranks_as_plain_data_and_comes_back_equal():
    for outcome in (PREPARED, RankOutcome(USER_FAILURE)):
        wire = outcome.to_wire()
        # JSON-able, and its pickle names no class: no peer has to build one of ours.
        assert json.loads(json.dumps(wire)) == wire
        opcodes = {opcode.name for opcode, _, _ in pickletools.genops(pickle.dumps(wire))}
        assert not opcodes & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "INST", "OBJ", "NEWOBJ"}
        assert RankOutcome.from_wire(wire) == outcome


def test_the_lowest_failed_rank_is_the_first_failure():
    platform = RankFailure(int(ExitCode.PLATFORM_ERROR), "the managed trainer failed while preparing: boom")
    outcomes = [PREPARED, RankOutcome(platform), RankOutcome(USER_FAILURE)]
    assert first_failure(outcomes) == (1, platform)
    assert first_failure([PREPARED, PREPARED]) is None


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (ExitCode.USER_ERROR, UserError),
        (ExitCode.PLATFORM_ERROR, PlatformError),
        (ExitCode.TERMINATED, PlatformError),
    ],
)
def test_a_failure_is_the_failing_ranks_sentence_there_and_names_the_rank_elsewhere(code, kind):
    failure = RankFailure(int(code), "it broke")
    own, other = failure.error(2, my_rank=2), failure.error(2, my_rank=0)
    assert (type(own), str(own)) == (kind, "it broke")
    assert (type(other), str(other)) == (kind, "rank 2 failed: it broke")


def test_records_per_rank_read_one_channel_in_rank_order():
    outcomes = [PREPARED, RankOutcome(records={"train": 599, "validation": 0})]
    assert records_per_rank(outcomes, "train") == [600, 599]
    assert records_per_rank(outcomes, "validation") == [100, 0]


def test_every_rank_raises_the_first_failure_and_only_the_failing_rank_keeps_its_cause():
    local = ValueError("the cause on rank 1")
    values = [PREPARED.to_wire(), RankOutcome(USER_FAILURE).to_wire(), PREPARED.to_wire()]
    with pytest.raises(UserError) as failed:
        agree(Gathered(1, values), RankOutcome(USER_FAILURE), local)
    assert (str(failed.value), failed.value.__cause__) == (USER_FAILURE.message, local)
    with pytest.raises(UserError) as elsewhere:
        agree(Gathered(2, values), PREPARED, None)
    assert str(elsewhere.value) == f"rank 1 failed: {USER_FAILURE.message}"
    assert elsewhere.value.__cause__ is None


def test_when_every_rank_prepared_each_learns_every_ranks_records():
    values = [PREPARED.to_wire(), RankOutcome(records={"train": 599}).to_wire()]
    outcomes = agree(Gathered(0, values), PREPARED, None)
    assert outcomes == (PREPARED, RankOutcome(records={"train": 599}))
