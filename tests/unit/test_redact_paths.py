"""Property: a random secret given any way a job gives one is in no line the image writes about the job.

Each example writes a job whose secrets are random texts full of what quoting and escaping act on
(quotes, spaces, backslashes, $, newlines, unicode, =, :) and gives them as a secret-named
hyperparameter, under a secret key nested in a dict-valued hyperparameter (or in a string holding JSON),
as an environment variable, as a ``-x NAME=VALUE`` custom mpirun option (written with shell quoting), as
a URL's password and as the job's secret in a channel file. Each goes through every path that writes:
the mpirun command line as the master logs it, the dry run's JSON, the failure file (a cause quoting the
values, a rank's report as its launcher masks it) and log records through the entry's RedactingFilter.
No secret, nor its shell-quoted, JSON or repr form, nor even its random core, may appear in what they
wrote. A seeded generator, so a failure names its seed and reproduces.
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import shlex
import string
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sagetrain.__main__ import main as sagetrain_main
from sagetrain.config.channels import Channel
from sagetrain.config.job_files import JobFiles
from sagetrain.config.job_secret import CHANNEL_KEY
from sagetrain.config.paths import Paths
from sagetrain.contracts import RunDir
from sagetrain.launch.mpi import log_mpirun_command, mpi_launch
from sagetrain.launch.rank import report_redactor
from sagetrain.preparation import Preparation, launch_spec, prepare_job
from sagetrain.redact import RedactingFilter
from sagetrain.report.job_end import JobEnd
from sagetrain.report.verdict import RankFailure, Verdict

EXAMPLES = 40
TRICKY = ["'", '"', " ", "\\", "$", "\n", "\t", "=", ":", "é", "中", "😀", "\u200b", "`", ";", "{", "}", "[",
          "]", ",", "%", "#", "!", "~", "<", "(", "\\n", "'\"'\"'", "\\'", '\\"']  # fmt: skip
URL_SAFE = [char for char in TRICKY if not any(c in char for c in " \n\t\\#/?@") and char != "\u200b"]
HYPERPARAMETER_NAMES = ["api_token", "db_password", "passwd", "GH_PAT", "clientSecret", "my.api-key", "pwd"]
NESTED_KEYS = ["password", "token", "secretKey", "pass", "credentials"]
ENV_NAMES = ["WANDB_API_KEY", "DB_PASSWORD", "MY_SECRET", "AUTH_HEADER"]
OPTION_NAMES = ["HF_TOKEN", "NEPTUNE_API_TOKEN", "COMET_PRIVATE_KEY"]
SECRET_CHANNEL = "vault"


@dataclass(frozen=True)
class Secret:
    value: str
    core: str  # random letters and digits the value holds: found anywhere means some form leaked

    def leaks(self, text: str) -> list[str]:
        forms = {
            self.value,
            shlex.quote(self.value),
            json.dumps(self.value),
            json.dumps(self.value, ensure_ascii=False),
            repr(self.value),
            self.core,
        }
        return sorted(form for form in forms if form in text)


def random_secret(rng: random.Random, tricky: list[str]) -> Secret:
    core = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(10))
    pieces = [rng.choice(tricky) for _ in range(rng.randint(1, 8))]
    pieces.insert(rng.randint(0, len(pieces)), core)
    return Secret("".join(pieces), core)


def shell_written(value: str, rng: random.Random) -> str:
    """``value`` as one shell word, in one of the ways people quote."""
    style = rng.choice(["quote", "double", "backslash"])
    if style == "quote":
        return shlex.quote(value)
    if style == "double":  # shlex, like the shell, takes \\ and \" as escapes inside double quotes
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "".join(char if char.isalnum() else "\\" + char for char in value)


@dataclass(frozen=True)
class Example:
    seed: int
    hyperparameters: dict[str, object]
    env: dict[str, str]
    secrets: tuple[Secret, ...]
    engine_hyperparameter: str
    channel_file: Secret  # the job's secret, in the file of the channel CHANNEL_KEY names


def example(seed: int) -> Example:
    rng = random.Random(seed)
    hp, nested, env, option = (random_secret(rng, TRICKY) for _ in range(4))
    url = random_secret(rng, URL_SAFE)
    channel_file = random_secret(rng, TRICKY)
    nested_key = rng.choice(NESTED_KEYS)
    holder: object = rng.choice(
        [
            {"db": {"user": "bob", nested_key: nested.value}},
            {"stores": [{"name": "a", "config": {nested_key: nested.value}}]},
            json.dumps({nested_key: nested.value}),  # a string holding JSON
        ]
    )
    option_name = rng.choice(OPTION_NAMES)
    engine = "sagemaker_mpi_enabled" if seed % 2 else "sagemaker_multi_worker_mirrored_strategy_enabled"
    hyperparameters: dict[str, object] = {
        "sagemaker_program": "train.py",
        engine: True,
        "epochs": 3,
        rng.choice(HYPERPARAMETER_NAMES): hp.value,
        "settings": holder,
        "tracking_uri": f"https://user:{url.value}@tracking.example.com/x",
        "sagemaker_mpi_custom_mpi_options": f"-x {option_name}={shell_written(option.value, rng)} -x A=b",
        CHANNEL_KEY: SECRET_CHANNEL,
    }
    secrets = (hp, nested, env, option, url, channel_file)
    return Example(seed, hyperparameters, {rng.choice(ENV_NAMES): env.value}, secrets, engine, channel_file)


def logged(
    records: list[tuple[str, tuple[object, ...]]],
    redact: RedactingFilter,
    call: Callable[[], None] | None,
    level: int = logging.INFO,
) -> str:
    """What the records, then ``call``, log through a handler with ``redact``, as the entry formats it, at
    ``level`` (the entry's default, or the job's sagemaker_container_log_level)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("sagetrain %(levelname)s: %(message)s"))
    handler.addFilter(redact)
    logger = logging.getLogger("sagetrain")
    logger.addHandler(handler)
    saved = logger.level
    logger.setLevel(level)
    try:
        for message, args in records:
            logger.warning(message, *args)
        if call is not None:
            call()
    finally:
        logger.setLevel(saved)
        logger.removeHandler(handler)
    return stream.getvalue()


def every_line_written(job: Example, root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """What each path wrote about ``job``, by path."""
    environ = {"PATH": "/usr/bin:/bin", **job.env}
    written: dict[str, str] = {}

    # The dry run, as `python -m sagetrain plan` prints it.
    sagetrain_main(["plan", "--root", str(root)])
    written["dry run"] = capsys.readouterr().out

    prepared = prepare_job(environ, Preparation.DESCRIBE, root=root)
    log_filter = RedactingFilter()
    log_filter.redactor = prepared.secrets.redactor
    values = [secret.value for secret in job.secrets]

    # The mpirun command line, as the master logs it before starting mpirun (whole at debug level).
    if job.engine_hyperparameter == "sagemaker_mpi_enabled":
        spec = launch_spec(prepared, environ, Preparation.DESCRIBE)
        command, _ = mpi_launch(spec, "algo-1:7077")
        lines = logged([], log_filter, lambda: log_mpirun_command(spec, command), logging.DEBUG)
        written["mpirun line"] = next(line for line in lines.splitlines() if "mpirun command:" in line)

    # Log records: values as arguments, in containers, re-quoted inside the message, in a traceback.
    def raise_and_log() -> None:
        try:
            raise ValueError(*values)
        except ValueError:
            logging.getLogger("sagetrain").exception("could not use %r", values)

    quoted = " ".join(f"{shlex.quote(v)} {json.dumps(v)} {v!r}" for v in values)
    written["log records"] = logged(
        [("value %s", (v,)) for v in values]
        + [("%r and %s", (values, {"k": values})), (f"inline {quoted}", ())],
        log_filter,
        raise_and_log,
    )

    # A rank's report as its launcher sends it (masked with what that host's entry read, from its run
    # folder, and the rank's own variables), then the failure file the master writes from it.
    rank_environ = {**environ, "SAGEMAKER_BASE_DIR": str(root)}
    run_dir = RunDir(root.parent / "run")
    run_dir.write_masked(prepared.secrets.redactor)
    failure = RankFailure(
        rank=1,
        host="algo-2",
        exit_code=1,
        program="train.py",
        message=f"bad arguments {shlex.join(values)}",
        traceback=f"ValueError: {values!r}",
        last_lines=tuple(f"argv: {json.dumps(v)}" for v in values),
    ).masked(report_redactor(run_dir, rank_environ))
    written["rank report"] = f"{failure.cause()}\n{failure.detail()}"
    end = JobEnd(Paths(root), RedactingFilter())
    end.learn_secrets(prepared.secrets.redactor)
    end.report(failure.verdict())
    written["failure file"] = Paths(root).failure_file.read_text()

    # A cause of our own that quotes the values (an exception's repr, a command line).
    end = JobEnd(Paths(root), RedactingFilter())
    end.learn_secrets(prepared.secrets.redactor)
    Paths(root).failure_file.unlink()
    end.report(Verdict(2, f"internal error in sagetrain: {ValueError(*values)!r}", quoted))
    written["failure sentence"] = Paths(root).failure_file.read_text()
    return written


@pytest.mark.parametrize("seed", range(EXAMPLES))
def test_no_form_of_a_secret_is_in_any_line_written(seed, tmp_path, monkeypatch, capsys):
    job = example(seed)
    root = tmp_path / "ml"
    paths = JobFiles(
        ("algo-1", "algo-2"), job.hyperparameters, (Channel("train"), Channel(SECRET_CHANNEL))
    ).write(root, "algo-1")
    (paths.channel_dir(SECRET_CHANNEL) / "job-secret").write_text(job.channel_file.value, encoding="utf-8")
    # The dry run reads this process's environment: the job's, and nothing of the test runner's.
    monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin:/bin", "SAGEMAKER_BASE_DIR": str(root), **job.env})
    written = every_line_written(job, root, capsys)
    leaks = {
        (path, secret.value): found
        for path, text in written.items()
        for secret in job.secrets
        if (found := secret.leaks(text))
    }
    assert leaks == {}, f"seed {seed}"
    # The paths did write: the masks are where the values were.
    assert [path for path, text in written.items() if "***" not in text] == [], written
    description = json.loads(written["dry run"])
    if "mpirun line" in written:
        # Masked argument by argument, then quoted: the line reads back as the dry run's masked command.
        line = written["mpirun line"].removeprefix("sagetrain DEBUG: mpirun command: ")
        assert shlex.split(line) == description["launch"]["command"]


def test_the_generator_makes_what_quoting_acts_on():
    values = [secret.value for seed in range(EXAMPLES) for secret in example(seed).secrets]
    for char in ("'", '"', " ", "\\", "$", "\n", "=", ":", "é", "😀"):
        assert any(char in value for value in values), char
    assert any(shlex.quote(v) != v and repr(v)[1:-1] != v and json.dumps(v)[1:-1] != v for v in values)
    assert sys.maxunicode > 0xFFFF  # astral characters (the emoji) are one character each
