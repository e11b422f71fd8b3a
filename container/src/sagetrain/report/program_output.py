"""What a rank printed, read for its failure report: terminal codes stripped, TensorFlow's start-up chatter
told apart, and the last Python exception found (type and message, Keras' and TensorFlow's wrappers
resolved to their cause). Pure: the rank launcher (launch/rank.py) hands in the lines it kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# CSI sequences (colours, cursor moves: Keras prints its messages in bold), OSC sequences (titles,
# links), and the two-character escapes.
_TERMINAL_CODE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

# An absl/glog record as TensorFlow's C++ code prints it: severity, date, time, thread, file:line].
GLOG_RECORD = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.-]+:\d+\]")
_GLOG_INFO = re.compile(r"^I\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ ")
# An INFO record of TensorFlow's C++ code logged before absl's log is initialised, which prints no date
# ("0000 00:00"): not a record of absl-py's Python logging, which a program may use for its own lines.
_EARLY_CXX_INFO = re.compile(r"^I0000 00:00:\d+\.\d+\s+\d+ [\w.-]+\.(?:cc|h):\d+\]")

# absl's header before the first record TensorFlow's C++ code logs in a process, even with INFO records
# off (a warning still prints it): it says nothing of the record that follows.
_ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"

# What TensorFlow prints while it starts, on every rank, whatever the program does: never a failure's
# cause. (TF_CPP_MIN_LOG_LEVEL=1, the job's default, keeps most of them from being printed at all; not the
# INFO records logged before TensorFlow applies it, such as oneDNN's on CPUs where oneDNN is on by default:
# the rank launcher leaves those out, see is_early_info_record.)
_STARTUP_LINES = re.compile(
    "|".join(
        (
            f"^{re.escape(_ABSL_PREAMBLE)}$",
            r"^To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler",
            r"oneDNN custom operations are on\.",
            r"Unable to register (?:cuDNN|cuFFT|cuBLAS) factory",
            r"computation placer already registered",
            r"cpu_feature_guard\.cc:\d+\]",
        )
    )
)

# What TensorFlow's collectives log when a peer process of a tf.distribute job exits first, also when the
# job succeeded: a record and its gRPC detail lines. Worth showing only when the program then fails.
_SHUTDOWN_RECORD = re.compile(r"BaseCollectiveExecutor::StartAbort|Polled an error from coordination service")
_SHUTDOWN_DETAIL = ("Additional GRPC error information", ":")

_TRACEBACK_START = "Traceback (most recent call last):"
# ``pkg.module.TypeName: message`` or ``TypeName`` alone, as Python's traceback printer ends.
_EXCEPTION_LINE = re.compile(r"^((?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*))(?:: ?(.*))?$")

# Keras 3 wraps an error raised inside a layer's call: the cause is the paragraph after this line,
# before "Arguments received by …".
_KERAS_CALL_WRAPPER = "Exception encountered when calling"
_KERAS_ARGUMENTS = "Arguments received by"
# TensorFlow's error for a failed graph op: the cause follows the stack of where the op was defined.
_TF_GRAPH_ERROR = "Graph execution error:"
_TF_GRAPH_DETAIL = re.compile(
    r"^Detected at node .* defined at \(most recent call last\):$|^\s+File \"|^\s*\[\["
)

# At most this much of one line is kept: a program may print megabytes without a newline.
MAX_LINE_CHARS = 4096


def plain(line: str) -> str:
    """``line`` as a terminal would show it at its end: terminal codes removed, and of a line redrawn
    with carriage returns (a progress bar), only the last drawing."""
    text = _TERMINAL_CODE.sub("", line.rstrip("\r\n"))
    if "\r" in text:
        text = next((part for part in reversed(text.split("\r")) if part.strip()), "")
    return text[:MAX_LINE_CHARS]


def is_noise(line: str) -> bool:
    """Whether a (plain) line says nothing about how the program ended: TensorFlow's start-up lines and
    its C++ INFO records, and blank lines."""
    return not line.strip() or bool(_STARTUP_LINES.search(line) or _GLOG_INFO.match(line))


def is_early_info_record(line: str) -> bool:
    """Whether a (plain) line is an INFO record TensorFlow's C++ code logged before absl's log was
    initialised, which TF_CPP_MIN_LOG_LEVEL does not hold back."""
    return bool(_EARLY_CXX_INFO.match(line))


def is_log_preamble(line: str) -> bool:
    """Whether a (plain) line is absl's header before a process's first C++ log record."""
    return line == _ABSL_PREAMBLE


def without_noise(lines: Iterable[str]) -> list[str]:
    return [line for line in lines if not is_noise(line)]


class ShutdownNoise:
    """Tells TensorFlow's shutdown records (and their detail lines) apart, line by line, as they come."""

    def __init__(self) -> None:
        self._in_record = False

    def holds(self, line: str) -> bool:
        """Whether (plain) ``line`` belongs to a shutdown record."""
        if _SHUTDOWN_RECORD.search(line):
            self._in_record = True
        elif not (self._in_record and line.startswith(_SHUTDOWN_DETAIL)):
            self._in_record = False
        return self._in_record


@dataclass(frozen=True)
class RaisedException:
    """The last exception a Python program printed a traceback for."""

    type_name: str  # without its module: ``InvalidArgumentError``
    message: str  # its cause on one line (Keras' and TensorFlow's wrappers resolved)
    traceback: str  # the traceback as printed, plain text

    @property
    def sentence(self) -> str:
        return f"{self.type_name}: {self.message}" if self.message else self.type_name


def last_exception(lines: Sequence[str]) -> RaisedException | None:
    """The last exception in ``lines`` (plain lines of what the program wrote to stderr), None when they
    hold no Python traceback ending in an exception line."""
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].rstrip() == _TRACEBACK_START), None)
    if start is None:
        return None
    at = start + 1
    while at < len(lines) and (lines[at].startswith((" ", "\t")) or not lines[at].strip()):
        at += 1  # the frames: "  File …", their source lines and carets
    match = _EXCEPTION_LINE.match(lines[at]) if at < len(lines) else None
    if match is None:
        return None
    message_lines = [match.group(3) or ""]
    end = at + 1
    while end < len(lines) and not GLOG_RECORD.match(lines[end]) and not _STARTUP_LINES.search(lines[end]):
        message_lines.append(lines[end])
        end += 1
    return RaisedException(
        type_name=match.group(2),
        message=one_line(resolved_message(message_lines)),
        traceback="\n".join(lines[start:end]).rstrip(),
    )


def resolved_message(message_lines: Sequence[str]) -> list[str]:
    """An exception's message lines, with the wrappers Keras and TensorFlow put around the real cause
    taken off. Pure."""
    first = message_lines[0].strip() if message_lines else ""
    if first.startswith(_KERAS_CALL_WRAPPER):
        cause = []
        for line in message_lines[1:]:
            if line.startswith(_KERAS_ARGUMENTS):
                break
            cause.append(line)
        return cause if any(line.strip() for line in cause) else list(message_lines)
    if first == _TF_GRAPH_ERROR:
        cause = [line for line in message_lines[1:] if line.strip() and not _TF_GRAPH_DETAIL.search(line)]
        return cause or list(message_lines)
    return list(message_lines)


def one_line(lines: Iterable[str]) -> str:
    return " ".join(" ".join(lines).split())


def cut(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters, else its start and an ellipsis. Pure."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)].rstrip() + "…"
