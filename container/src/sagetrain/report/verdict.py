"""What a job ended with, and how a failing rank is described in one sentence."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sagetrain.config.files import quoted
from sagetrain.errors import ExitCode
from sagetrain.report.keras_2_code import LEGACY_KERAS_HINT, shows_keras_2_code
from sagetrain.report.program_output import cut

# SageMaker shows the first 1,024 characters of /opt/ml/output/failure as the job's FailureReason: the
# cause, the file's first line, fits in them whole.
MAX_CAUSE_CHARS = 1000


@dataclass(frozen=True)
class Verdict:
    exit_code: int
    cause: str = ""  # one plain sentence; empty on success
    detail: str = ""  # traceback, last output lines

    @property
    def succeeded(self) -> bool:
        return self.exit_code == ExitCode.SUCCESS


SUCCESS = Verdict(ExitCode.SUCCESS)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class RankFailure:
    """A rank's own account of its failure, sent by the rank launcher to the master
    (launch/coordinator/wire.py: RankFailed)."""

    rank: int
    host: str
    exit_code: int  # 128+N when killed by signal N
    program: str
    message: str = ""  # from the program's SAGETRAIN_ERROR_FILE
    traceback: str = ""
    last_lines: tuple[str, ...] = field(default=())

    def masked(self, redact: Callable[[str], str]) -> RankFailure:
        """This report with ``redact`` applied to the program's words (the last lines as one text: a
        secret may span lines)."""
        lines = redact("\n".join(self.last_lines)).split("\n") if self.last_lines else []
        return dataclasses.replace(
            self,
            program=redact(self.program),
            message=redact(self.message),
            traceback=redact(self.traceback),
            last_lines=tuple(lines),
        )

    def cause(self) -> str:
        """One sentence within MAX_CAUSE_CHARS: which program failed where, then what it said (its error
        file's sentence, or its last exception), or else the last line it printed; a long message is
        cut, never the program, the rank or the legacy-Keras hint."""
        where = f"on rank {self.rank} (host {self.host})"
        if self.exit_code > 128:
            head = f"{self.program} was killed by {signal_name(self.exit_code - 128)} {where}"
            if self.exit_code - 128 == signal.SIGKILL:
                head += "; the host may have run out of memory"
        elif self.message:
            head = f"{self.program} failed {where}"
        else:
            head = f"{self.program} exited with code {self.exit_code} {where}"
        said = f": {self.message}" if self.message else ""
        if not said and self.last_lines:
            said = f"; its last line: {quoted(self.last_lines[-1], limit=MAX_CAUSE_CHARS)}"
        hint = f"; {LEGACY_KERAS_HINT}" if self.shows_keras_2_code() else ""
        return head + cut(said, MAX_CAUSE_CHARS - len(head) - len(hint)) + hint

    def shows_keras_2_code(self) -> bool:
        """Whether the rank failed on an error Keras 3 raises for code written for Keras 2."""
        return shows_keras_2_code((self.message, self.traceback, *self.last_lines))

    def detail(self) -> str:
        parts = [
            f"{self.program} on rank {self.rank} (host {self.host}) ended with exit code {self.exit_code}."
        ]
        if self.traceback:
            parts.append(self.traceback.rstrip())
        if self.last_lines:
            parts.append(f"Last lines printed by rank {self.rank}:\n" + "\n".join(self.last_lines))
        return "\n\n".join(parts)

    def verdict(self) -> Verdict:
        return Verdict(self.exit_code, self.cause(), self.detail())

    def is_knock_on(self) -> bool:
        """Whether this rank most likely failed only because another one had: it was stopped by a
        signal the launcher sends when tearing the job down, or Horovod reported a peer's exit."""
        if self.exit_code - 128 in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            return True
        said = "\n".join((self.message, self.traceback, *self.last_lines))
        return any(marker in said for marker in KNOCK_ON_MARKERS)


# What Horovod makes every surviving rank raise once one rank has failed or exited.
KNOCK_ON_MARKERS = ("Horovod has been shut down", "HorovodInternalError")


def root_failure(failures: Sequence[RankFailure]) -> RankFailure | None:
    """The failure to blame among the ranks' reports, in arrival order: the first one that is not a
    knock-on of another rank's failure, else the first. Pure."""
    for failure in failures:
        if not failure.is_knock_on():
            return failure
    return failures[0] if failures else None
