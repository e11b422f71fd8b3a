"""What every rank tells every other once it has prepared, and what they all conclude: the job stops with
the first failure's sentence, or trains on the records each rank holds. No TensorFlow; pure but for the
one collective in ``agree``.

A rank's outcome crosses ranks as plain data (a dict of strings, ints and lists), never as a pickled
object of this package's classes: Horovod's object collectives unpickle whatever arrives, and
MultiWorkerMirroredStrategy's (trainer/collectives.py) build plain data only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sagetrain.errors import ExitCode, PlatformError, SagetrainError, UserError

if TYPE_CHECKING:  # the collectives import TensorFlow; the decisions here are tested without it
    from sagetrain.trainer.collectives import Collectives

# The outcome's fields on the wire, spelled here only: encoder and decoder are the two methods below.
_FAILURE, _RECORDS = "failure", "records"


@dataclass(frozen=True)
class RankFailure:
    """Why a rank could not prepare: its exit code and its one sentence."""

    exit_code: int
    message: str

    def error(self, failed_rank: int, my_rank: int) -> SagetrainError:
        """The error ``my_rank`` raises for this failure of ``failed_rank``: the failing rank's own
        sentence as it is, the others' naming the rank; a user error stays one (exit 1), anything else is
        the platform's."""
        message = self.message if failed_rank == my_rank else f"rank {failed_rank} failed: {self.message}"
        return UserError(message) if self.exit_code == ExitCode.USER_ERROR else PlatformError(message)


@dataclass(frozen=True)
class RankOutcome:
    """One rank's result of preparing: a failure, or the records it holds in each of its channels."""

    failure: RankFailure | None = None
    records: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def to_wire(self) -> dict[str, Any]:
        """Plain data for the collective (builtins only, so no peer unpickles a class)."""
        failure = [int(self.failure.exit_code), str(self.failure.message)] if self.failure else None
        return {_FAILURE: failure, _RECORDS: {str(name): int(count) for name, count in self.records.items()}}

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> RankOutcome:
        failure = value[_FAILURE]
        return cls(
            failure=RankFailure(int(failure[0]), str(failure[1])) if failure is not None else None,
            records=MappingProxyType({str(name): int(count) for name, count in value[_RECORDS].items()}),
        )


def first_failure(outcomes: Sequence[RankOutcome]) -> tuple[int, RankFailure] | None:
    """The lowest rank that failed, with its failure; None when every rank prepared."""
    return next(
        ((rank, outcome.failure) for rank, outcome in enumerate(outcomes) if outcome.failure is not None),
        None,
    )


def records_per_rank(outcomes: Sequence[RankOutcome], channel: str) -> list[int]:
    """Every rank's records of ``channel``, by rank (every rank has the same channels once all prepared)."""
    return [outcome.records[channel] for outcome in outcomes]


def agree(
    collectives: Collectives, mine: RankOutcome, local_error: BaseException | None
) -> tuple[RankOutcome, ...]:
    """Every rank learns every rank's outcome; if any failed, all raise the first failure's error (the
    failing rank keeps its own exception as the cause, so its error file has the traceback). Every rank
    calls this before any other collective, so a rank that failed never leaves the others waiting."""
    outcomes = tuple(RankOutcome.from_wire(value) for value in collectives.allgather_object(mine.to_wire()))
    failed = first_failure(outcomes)
    if failed is not None:
        rank, failure = failed
        mine_failed = rank == collectives.ranks.rank
        raise failure.error(rank, collectives.ranks.rank) from (local_error if mine_failed else None)
    return outcomes
