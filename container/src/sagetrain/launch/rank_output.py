"""A rank's output as its rank launcher passes it on: copied through line by line, tagged with the rank
and its host when the job has more than one process (mpirun gathers every rank's output on the master),
and kept for the failure report: the last lines of both streams and the last lines of stderr, where
Python prints its traceback. TensorFlow's shutdown records are held back until the program's exit says
whether they matter: a tf.distribute job that succeeded does not end its log with them."""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

from sagetrain.contracts import RankPlace, tf_info_records_off
from sagetrain.report.program_output import (
    RaisedException,
    ShutdownNoise,
    is_early_info_record,
    is_log_preamble,
    last_exception,
    plain,
    without_noise,
)

# The last lines of the program's output a failure report shows, noise left out.
LAST_LINES = 20
# Kept of both streams to find LAST_LINES among the noise, and of stderr to find a whole traceback in:
# TensorFlow's tracebacks of a failed graph op run to a few hundred lines.
KEPT_LINES = 200
KEPT_STDERR_LINES = 2000
# Read at most this much at a time: a program may print megabytes without a newline.
READ_CHUNK_BYTES = 64 * 1024
# How long the copies may go on after the program exited: a daemon it left may hold the pipes open.
COPY_END_SECONDS = 5.0


def rank_tag(host: str, place: RankPlace) -> str:
    """What goes before each of a rank's lines: nothing for a one-process job. Pure."""
    return f"[{host or 'unknown'} rank {place.rank}] " if place.size > 1 else ""


# A tag as rank_tag writes it, for readers of a job's log (the tests, the benchmarks).
RANK_TAG = re.compile(r"^\[(?P<host>[^\]\s]+) rank (?P<rank>\d+)\] ")


def untagged(line: str) -> str:
    """``line`` without its rank tag, if it has one. Pure."""
    return RANK_TAG.sub("", line, count=1)


@dataclass(frozen=True)
class ProgramAccount:
    """What a failure report needs of a program's output."""

    last_lines: tuple[str, ...]  # plain text, TensorFlow's start-up lines and blank lines left out
    raised: RaisedException | None  # the last exception it printed a traceback for


def ending_with_last_error(said: list[str], errors: list[str]) -> list[str]:
    """``said`` (both streams' lines, as their copiers took them) ending with the program's last line on
    stderr, where a failing program says why. Two pipes have no order between them: a line printed to
    stdout just before the error can be taken after it, and the failure sentence quotes the last line."""
    if not errors or (said and said[-1] == errors[-1]):
        return said
    last_error = errors[-1]
    at = max((i for i, line in enumerate(said) if line == last_error), default=None)
    rest = said if at is None else said[:at] + said[at + 1 :]
    return [*rest, last_error][-LAST_LINES:]


class RankOutput:
    """Copies ``streams`` ((source, sink) pairs: the program's stdout and stderr, then ours) on threads
    of their own; ``finish`` once the program has exited. With ``info_records_off`` (the job's
    TensorFlow log level leaves INFO records out), the INFO records TensorFlow's C++ code logs before it
    applies that level (oneDNN's, on CPUs where it is on by default) are left out too: they would
    otherwise be printed on every rank."""

    def __init__(
        self,
        stdout: tuple[IO[bytes] | None, IO[bytes]],
        stderr: tuple[IO[bytes] | None, IO[bytes]],
        tag: str,
        info_records_off: bool = False,
    ) -> None:
        self._tag = tag.encode()
        self._info_records_off = info_records_off
        self._lock = threading.Lock()
        self._lines: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
        self._stderr_lines: collections.deque[str] = collections.deque(maxlen=KEPT_STDERR_LINES)
        self._held: list[tuple[IO[bytes], bytes]] = []
        self._copiers = [
            threading.Thread(target=self._copy, args=(*stdout, False), name="stdout", daemon=True),
            threading.Thread(target=self._copy, args=(*stderr, True), name="stderr", daemon=True),
        ]
        for copier in self._copiers:
            copier.start()

    @classmethod
    def of_program(cls, popen: subprocess.Popen[bytes], tag: str, env: Mapping[str, str]) -> RankOutput:
        """The program's stdout and stderr copied to ours, leaving out what the TensorFlow log level of
        ``env``, the program's environment, leaves out."""
        return cls(
            (popen.stdout, sys.stdout.buffer),
            (popen.stderr, sys.stderr.buffer),
            tag,
            info_records_off=tf_info_records_off(env),
        )

    def _copy(self, source: IO[bytes] | None, sink: IO[bytes], is_stderr: bool) -> None:
        if source is None:
            return
        shutdown = ShutdownNoise()
        at_line_start = True
        for chunk in iter(lambda: source.readline(READ_CHUNK_BYTES), b""):
            text = plain(chunk.decode("utf-8", "replace"))
            starts_line, at_line_start = at_line_start, chunk.endswith(b"\n")
            if starts_line and at_line_start and self._left_out(text):
                continue
            tagged = self._tag + chunk if starts_line else chunk
            with self._lock:
                self._lines.append(text)
                if is_stderr:
                    self._stderr_lines.append(text)
                if shutdown.holds(text):
                    self._held.append((sink, tagged))
                    continue
            sink.write(tagged)
            sink.flush()
        source.close()

    def _left_out(self, line: str) -> bool:
        """Whether a whole (plain) line is not passed on: absl's header (the record after it is shown;
        the header itself says nothing), and the early INFO records the job's log level leaves out."""
        return is_log_preamble(line) or (self._info_records_off and is_early_info_record(line))

    def finish(self, exit_code: int) -> ProgramAccount:
        """What the program's output says, once it has exited with ``exit_code``; the held shutdown
        records are passed on only when it failed."""
        for copier in self._copiers:
            copier.join(timeout=COPY_END_SECONDS)
        with self._lock:
            held, self._held = self._held, []
            lines, stderr_lines = list(self._lines), list(self._stderr_lines)
        if exit_code != 0:
            for sink, line in held:
                sink.write(line)
                sink.flush()
        said = ending_with_last_error(without_noise(lines)[-LAST_LINES:], without_noise(stderr_lines))
        return ProgramAccount(tuple(said), last_exception(stderr_lines))
