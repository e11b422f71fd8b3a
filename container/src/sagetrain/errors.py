"""Typed errors, each mapped to one exit code (docs/contracts.md, "Exit codes")."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    SUCCESS = 0
    USER_ERROR = 1
    PLATFORM_ERROR = 2
    TERMINATED = 143


class SagetrainError(Exception):
    """An error whose message is one plain sentence fit for the failure file's first line."""

    exit_code: int = ExitCode.PLATFORM_ERROR

    @property
    def cause(self) -> str:
        return str(self)


class UserError(SagetrainError):
    """The job's input is wrong: configuration, hyperparameters, code. The user can fix it."""

    exit_code = ExitCode.USER_ERROR


class PlatformError(SagetrainError):
    """Something this image or the cluster got wrong: a missing binary, sshd, a lost host."""

    exit_code = ExitCode.PLATFORM_ERROR


class Terminated(SagetrainError):
    """The container was asked to stop (SIGTERM/SIGINT), at ``signalled_at`` (wall clock, as files'
    modification times are)."""

    exit_code = ExitCode.TERMINATED

    def __init__(self, cause: str, signalled_at: float = 0.0) -> None:
        super().__init__(cause)
        self.signalled_at = signalled_at


def exit_code_of_returncode(returncode: int) -> int:
    """A child's return code as a shell reports it: 128+N when killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode
