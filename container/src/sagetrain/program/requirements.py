"""Installing what the user's code needs (``requirements.txt`` in the code folder, or the code folder as a
package) without undoing what the image was built around.

1. Which indexes pip would use, and whether this host reaches them (package_index.py): probed before pip
   runs, unless the requirements need no index (``--no-index``, or only files here that install without
   one). An index out of reach is said in one sentence within seconds; the install is still tried
   without it, since wheels shipped in the code folder need none.
2. What pip would install (``--dry-run --report``, without constraints): a requirement that would replace
   a protected package (protected.py) is refused, naming it, the version asked for, the image's, and the
   requirement that pulls it in.
3. The install itself, constrained to the protected packages as installed (``-c``), should pip resolve
   differently the second time.

pip's output goes to the log as it comes; its last error line goes into the failure sentence. pip's
network waits are bounded (``--retries``, ``--timeout``) on top of the probe.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sagetrain.deadline import Deadline
from sagetrain.errors import PlatformError, UserError
from sagetrain.program.package_index import (
    PipSettings,
    Requirements,
    Unreachable,
    first_unreachable,
    index_urls,
    read_pip_settings,
    read_requirements,
    without_credentials,
)
from sagetrain.program.protected import (
    Planned,
    Protected,
    UnreadableReport,
    constraints_text,
    installed_distributions,
    planned_installs,
    protected_packages,
    refusal,
    replacements,
)
from sagetrain.redact import CommandLine

log = logging.getLogger(__name__)

PIP = (sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check")
QUIET = ("--progress-bar", "off")  # the log is a file: no bar redrawn line by line
# The dry run only reads index pages and metadata: one retry and 5 s per connection or read keep a route
# that goes dark after the probe to about 12 s per request (pip's defaults, 5 retries of 15 s with
# backoff, took 72 to 99 s to give up on one requirement).
DRY_RUN_NETWORK = ("--retries", "1", "--timeout", "5")
# The install downloads what the dry run found (much of it from pip's cache by then): a slow mirror gets
# pip's own read timeout, and fewer retries than pip's five.
INSTALL_NETWORK = ("--retries", "3", "--timeout", "15")
OFFLINE = ("--no-index",)
# Name resolution and one TCP connection to each index (or its proxy), all of them together.
PROBE_SECONDS = 10.0
ERROR_LINE_MAX = 300
# pip's error line that only points at its documentation; the line before it names the conflict.
_ONLY_A_POINTER = "ResolutionImpossible"
_ROUTE_HINT = (
    "give the job a route to it (in a VPC: a subnet with a NAT gateway), or ship the wheels in the code "
    "folder (pip download -r requirements.txt -d wheels, and a line --find-links wheels in "
    "requirements.txt), or build a derived image with them installed"
)


@dataclass(frozen=True)
class Target:
    """What pip is asked to install."""

    what: str  # as the sentences name it: the requirements file, or the package's folder
    args: tuple[str, ...]  # pip's arguments for it
    requirements: Requirements  # what it asks for, as far as reading it tells

    @classmethod
    def requirements_file(cls, path: Path, environ: Mapping[str, str]) -> Target:
        return cls(str(path), ("-r", str(path)), read_requirements(path, environ))

    @classmethod
    def package(cls, folder: Path) -> Target:
        return cls(f"the package in {folder}", (str(folder),), Requirements(requirements=(str(folder),)))


def error_line(previous: str, line: str) -> str:
    """The error line to quote after ``line`` of pip's output: ``line``'s message when it is one of pip's
    own error lines (``ERROR: …``, or ``error: …`` for its diagnostics), else ``previous``. Pure."""
    for prefix in ("ERROR:", "error:"):
        if line.startswith(prefix):
            message = line[len(prefix) :].strip()
            if message and not message.startswith(_ONLY_A_POINTER):
                return message
    return previous


def shown_error(message: str) -> str:
    """pip's error line as a sentence quotes it: URL credentials masked, on one line, cut short. Pure."""
    text = " ".join(without_credentials(message).split())
    return text if len(text) <= ERROR_LINE_MAX else text[: ERROR_LINE_MAX - 1] + "…"


@dataclass(frozen=True)
class PipRun:
    returncode: int
    error: str = ""  # pip's last error line, as shown_error shows it

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_pip(command: Sequence[str], cwd: Path) -> PipRun:
    """Run pip, copying everything it prints to stderr as it prints it; its exit code and error line."""
    last = ""
    # No overall timeout: a large requirements file may rightly take many minutes. pip's own network
    # bounds stop a stalled download, and SageMaker's MaxRuntimeInSeconds the rest.
    with subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as process:
        for line in process.stdout or ():
            sys.stderr.write(line)
            sys.stderr.flush()
            last = error_line(last, line)
    return PipRun(process.returncode, shown_error(last))


def failed(what: str, run: PipRun) -> str:
    if not run.error:
        return f"installing {what} failed (pip exit code {run.returncode}; pip's output is in the job's log)"
    said = f'pip says "{run.error}"'
    return f"installing {what} failed: {said}; fix what it names (pip's output is in the job's log)"


def failed_offline(what: str, unreachable: Unreachable, run: PipRun) -> str:
    said = f'pip says "{run.error}"' if run.error else f"pip exit code {run.returncode}"
    return f"installing {what} failed: {unreachable.describe()}, and without it {said}; {_ROUTE_HINT}"


@dataclass(frozen=True)
class Plan:
    """What a dry run says pip would install, and the arguments it took to get there."""

    route: tuple[str, ...]  # () or OFFLINE
    planned: tuple[Planned, ...]
    environment: Mapping[str, str] = field(default_factory=dict)  # pip's marker environment


@dataclass(frozen=True)
class Installer:
    target: Target
    code_dir: Path
    scratch: Path  # a folder for pip's report and the constraints file, removed afterwards

    def dry_run(self, route: tuple[str, ...]) -> tuple[PipRun, Plan]:
        report = self.scratch / f"report{len(route)}.json"
        command = [
            *PIP,
            *QUIET,
            *DRY_RUN_NETWORK,
            *route,
            "--dry-run",
            "--report",
            str(report),
            *self.target.args,
        ]
        log.info("what installing %s would change: %s", self.target.what, CommandLine(tuple(command)))
        run = run_pip(command, self.code_dir)
        if not run.ok:
            return run, Plan(route, ())
        try:
            content: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
            return run, Plan(route, planned_installs(content), content.get("environment") or {})
        except (OSError, ValueError, UnreadableReport) as error:
            raise PlatformError(
                f"cannot read pip's report of what {self.target.what} asks for ({error})"
            ) from None

    def plan(self, urls: Sequence[str], settings: PipSettings, environ: Mapping[str, str]) -> Plan:
        """The dry run's plan, over the index when it can be reached, else (or when the requirements need
        none) from local files only; a UserError when pip cannot resolve the requirements either way."""
        offline: tuple[PipRun, Plan] | None = None
        if urls and self.target.requirements.local_only:
            offline = self.dry_run(OFFLINE)  # wheels shipped here may need no index at all
            if offline[0].ok:
                return offline[1]
            log.info(
                "%s needs more than the local files (pip's words above): trying its index", self.target.what
            )
        deadline = Deadline(PROBE_SECONDS, "a connection to the package index")
        unreachable = first_unreachable(urls, settings, environ, deadline) if urls else None
        if unreachable is None:
            run, plan = self.dry_run(())
            if not run.ok:
                raise UserError(failed(self.target.what, run))
            return plan
        log.warning("%s; installing %s from local files only", unreachable.describe(), self.target.what)
        run, plan = offline or self.dry_run(OFFLINE)
        if not run.ok:
            raise UserError(failed_offline(self.target.what, unreachable, run))
        return plan

    def install(self, plan: Plan, protected: Iterable[Protected]) -> None:
        constraints = self.scratch / "protected.txt"
        constraints.write_text(constraints_text(protected), encoding="utf-8")
        command = [*PIP, *QUIET, *INSTALL_NETWORK, *plan.route, "-c", str(constraints), *self.target.args]
        log.info("installing %s: %s", self.target.what, CommandLine(tuple(command)))
        run = run_pip(command, self.code_dir)
        if not run.ok:
            raise UserError(failed(self.target.what, run))


def install(target: Target, code_dir: Path, environ: Mapping[str, str]) -> None:
    """Install ``target`` as the module's docstring says; a UserError (one sentence) when it cannot be."""
    if target.requirements.complete and not target.requirements.requirements:
        log.info("%s asks for nothing to install", target.what)
        return
    settings = read_pip_settings(environ, Path.home(), Path(sys.prefix))
    urls = index_urls(settings, target.requirements.options)
    protected = protected_packages(installed_distributions())
    with tempfile.TemporaryDirectory(prefix="sagetrain-pip-") as scratch:
        installer = Installer(target, code_dir, Path(scratch))
        plan = installer.plan(urls, settings, environ)
        refused = refusal(target.what, replacements(plan.planned, protected, plan.environment))
        if refused is not None:
            raise UserError(refused)
        if not plan.planned:
            log.info("everything %s asks for is installed already", target.what)
            return
        installer.install(plan, protected.values())


def install_requirements(code_dir: Path, environ: Mapping[str, str]) -> None:
    requirements = code_dir / "requirements.txt"
    if requirements.is_file():
        install(Target.requirements_file(requirements, environ), code_dir, environ)


def install_package(code_dir: Path, environ: Mapping[str, str]) -> None:
    install(Target.package(code_dir), code_dir, environ)
