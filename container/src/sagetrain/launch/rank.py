"""The rank launcher (``sagetrain-rank -- <argv…>``): runs one rank of the program on its own host.

It gives the rank its own host's identity and facts (mpirun copies the master's environment to every
rank: SM_CURRENT_HOST, SM_RESOURCE_CONFIG, SM_NUM_GPUS... and SM_TRAINING_ENV would be the master's), the
rank variables and an error file; it tells the master it started, runs the program in the launcher's
own process group (a signal for the rank reaches both), keeps the last output lines, and when the
program fails reports ``{rank, host, exit code, message, last lines}`` to the master's coordinator.
See docs/contracts.md ("Launcher ↔ rank launcher").
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagetrain import contracts
from sagetrain.config.files import read_json_object
from sagetrain.config.paths import Paths, root_from_environ
from sagetrain.config.toolkit_env import own_host_variables
from sagetrain.contracts import RankPlace, RunDir
from sagetrain.errors import PlatformError, SagetrainError
from sagetrain.launch.coordinator import send_rank_failure, send_rank_started
from sagetrain.launch.process import ManagedProcess, exit_now
from sagetrain.launch.rank_output import ProgramAccount, RankOutput, rank_tag
from sagetrain.redact import Redactor, environment_secrets
from sagetrain.report.verdict import RankFailure


def end_with_parent(parent: int, program: ManagedProcess) -> None:
    """Once ``parent`` (whoever started this launcher: the entry, mpirun or orted) has exited, SIGKILL
    this launcher's process group: the program, whatever it started, and this launcher. Nothing else
    stops the rank then: its signals come from that parent. Blocks; run it on a thread."""
    try:
        pidfd = os.pidfd_open(parent)
    except ProcessLookupError:
        pidfd = None  # gone already
    except OSError:
        return  # no pidfd on this kernel: the program still dies with this launcher
    if pidfd is not None and os.getppid() == parent:
        select.select([pidfd], [], [])  # readable once the parent has exited
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    program.signal(signal.SIGKILL)  # a launcher that leads no group (started by hand) stops its program


@dataclass(frozen=True)
class RankSetup:
    """What the rank launcher gives its program, from its own host's files and the variables it got."""

    host: str  # this host, from its own resourceconfig.json ("" when unknown)
    place: RankPlace
    env: dict[str, str]
    error_file: Path
    coordinator: tuple[str, int] | None
    key: bytes | None  # this host's proof of membership, for its reports


def rank_setup(environ: Mapping[str, str]) -> RankSetup:
    run_dir = RunDir.from_env(environ)
    try:
        resource_config: dict[str, Any] | None = read_json_object(
            Paths(root_from_environ(environ)).resource_config
        )
    except SagetrainError:
        resource_config = None
    host = str((resource_config or {}).get("current_host") or "") or environ.get("SM_CURRENT_HOST", "")
    place = RankPlace.from_env(environ)
    error_file = run_dir.error_file(place.rank)
    env = {
        # What mpirun does not copy between hosts (credentials, secrets), from this host's own entry.
        **run_dir.read_host_env(),
        **environ,
        **own_host_variables(environ, host, resource_config if host else None, run_dir.read_host_facts(host)),
        **place.to_env(),
        contracts.ERROR_FILE_VAR: str(error_file),
    }
    coordinator = contracts.parse_coordinator(environ.get(contracts.COORDINATOR_VAR, ""), host)
    return RankSetup(host, place, env, error_file, coordinator, run_dir.read_host_key())


def run_rank(argv: list[str], environ: Mapping[str, str]) -> int:
    if not argv:
        print("usage: sagetrain-rank -- PROGRAM [ARG...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    setup = rank_setup(environ)
    setup.error_file.parent.mkdir(parents=True, exist_ok=True)
    setup.error_file.unlink(missing_ok=True)

    # The program runs in this launcher's process group, so a signal for the rank (OpenMPI and the entry
    # signal the rank launcher's group) reaches the program and whatever it started, SIGKILL included:
    # nothing is passed on, or the program would get it twice. Only a signal that came before the program
    # existed (while the master acknowledges the start) is passed on. Handlers go in before the program
    # starts: SIGTERM's default would kill this launcher alone.
    received: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    if setup.coordinator is not None and setup.key is not None:  # the master bounds mpirun's start by these
        send_rank_started(setup.coordinator, setup.key, setup.place.rank, setup.host)

    before_start = len(received)
    program = ManagedProcess.start(
        argv,
        name="rank",
        env=setup.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        new_session=False,
        parent_death_signal=signal.SIGKILL,  # the program never outlives its launcher
    )
    for signum in received[:before_start]:  # later ones reached the program through the group
        program.signal(signum)
    threading.Thread(target=end_with_parent, args=(parent, program), name="parent", daemon=True).start()
    # Registered so the entry on this host can stop the ranks (sshd/orted started them on a worker).
    registration = RunDir.from_env(environ).rank_registration(os.getpid())
    registration.parent.mkdir(parents=True, exist_ok=True)
    registration.write_text(str(program.pid))
    output = RankOutput.of_program(program.popen, rank_tag(setup.host, setup.place), setup.env)
    try:
        code = program.wait_for_exit()
        account = output.finish(code)
    finally:
        registration.unlink(missing_ok=True)
    if code != 0 and setup.coordinator is not None and setup.key is not None:
        failure = rank_failure(setup, code, environ.get(contracts.PROGRAM_VAR, Path(argv[0]).name), account)
        # Masked here, with this host's own secrets (its credentials are not the master's): the master
        # masks the verdict again with its own.
        redact = report_redactor(RunDir.from_env(environ), setup.env)
        send_rank_failure(setup.coordinator, setup.key, failure.masked(redact))
    return code


def report_redactor(run_dir: RunDir, env: Mapping[str, str]) -> Redactor:
    """What a rank's report is masked with on this host: the job's secrets as this host's entry read them,
    taken from the run folder as the host's key is, and the secrets in the rank's own variables."""
    return run_dir.read_masked().with_values(environment_secrets(env))


def rank_failure(setup: RankSetup, exit_code: int, program: str, account: ProgramAccount) -> RankFailure:
    """The rank's failure as its program told it: the sentence it left in its error file (the managed
    trainer's), else the last exception it printed; its traceback; the last lines it printed."""
    message, traceback = contracts.read_error_file(setup.error_file)
    if not message and account.raised is not None:
        message, traceback = account.raised.sentence, account.raised.traceback
    return RankFailure(
        rank=setup.place.rank,
        host=setup.host or "unknown",
        exit_code=exit_code,
        program=program,
        message=message,
        traceback=traceback,
        last_lines=account.last_lines,
    )


def program_argv(args: list[str]) -> list[str]:
    """``[--args-file FILE] [--] PROGRAM [ARG...]`` → the program's argv, with FILE's arguments last."""
    extra: list[str] = []
    if args[:1] == [contracts.ARGS_FILE_OPTION] and len(args) > 1:
        try:
            extra = [str(arg) for arg in json.loads(Path(args[1]).read_text(encoding="utf-8"))]
        except (OSError, ValueError, TypeError) as error:
            raise PlatformError(
                f"the rank launcher cannot read its arguments from {args[1]}: {error}"
            ) from None
        args = args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    return [*args, *extra] if args else []


def main() -> None:
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        raise SystemExit(0)
    exit_now(run_rank(program_argv(args), os.environ))


if __name__ == "__main__":
    main()
