"""Where a job's verdict becomes final: the report is written once, with the job's secrets masked, and
stop signals are turned into ``Terminated`` until then and ignored after."""

from __future__ import annotations

import logging
import signal
import time

from sagetrain.config.paths import Paths
from sagetrain.errors import Terminated
from sagetrain.redact import RedactingFilter, Redactor
from sagetrain.report.files import write_report
from sagetrain.report.verdict import Verdict

log = logging.getLogger("sagetrain")


class JobEnd:
    """SIGTERM/SIGINT and the report. The first signal raises Terminated in the main thread, which stops
    the job; once the verdict is final (the first ``report``), the report is written and no signal
    changes it. ``report`` is the one place a verdict becomes final."""

    def __init__(self, paths: Paths, log_filter: RedactingFilter) -> None:
        self._paths = paths
        self._stopping = False
        self._log_filter = log_filter
        self._redact = Redactor()
        self.verdict: Verdict | None = None

    def learn_secrets(self, redactor: Redactor) -> None:
        """From now on the log and the report mask these."""
        self._redact = redactor
        self._log_filter.redactor = redactor

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.verdict is not None or self._stopping:
            # The verdict is final, or the clean-up the first signal started must not be interrupted.
            state = "over" if self.verdict is not None else "stopping"
            log.info("%s ignored: the job is %s", signal.Signals(signum).name, state)
            return
        self._stopping = True
        raise Terminated(
            f"the job was stopped by {signal.Signals(signum).name} (the container was asked to stop)",
            signalled_at=time.time(),
        )

    def report(self, verdict: Verdict) -> Verdict:
        """Make ``verdict`` final and write it; the final verdict (the first one reported)."""
        if self.verdict is not None:
            return self.verdict
        # What is final is what is written and sent to the other hosts: with the secrets masked.
        verdict = self._masked(verdict)
        self.verdict = verdict
        self._write(verdict)
        return verdict

    def provisional(self, verdict: Verdict) -> None:
        """Write ``verdict`` now, for the final report to replace (unless the verdict is final already)."""
        if self.verdict is None:
            self._write(self._masked(verdict))

    def _masked(self, verdict: Verdict) -> Verdict:
        return Verdict(verdict.exit_code, self._redact(verdict.cause), self._redact(verdict.detail))

    def _write(self, verdict: Verdict) -> None:
        try:
            written = write_report(self._paths, verdict)
        except OSError as error:
            log.error("cannot write the report under %s: %s", self._paths.output_dir, error)
        else:
            log.info("wrote %s", written)
