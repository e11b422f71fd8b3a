"""buildspec.yml is CodeBuild schema 0.2 and calls only what the repository has."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PHASES = ("install", "pre_build", "build", "post_build")


@pytest.fixture(scope="module")
def buildspec() -> dict:
    return yaml.safe_load((REPO / "buildspec.yml").read_text())


def test_schema_version_and_phases(buildspec):
    assert buildspec["version"] == 0.2
    assert set(buildspec["phases"]) <= set(PHASES)
    for name, phase in buildspec["phases"].items():
        commands = phase["commands"]
        assert commands and all(isinstance(c, str) for c in commands), name
    assert all(isinstance(v, str) for v in buildspec["env"]["variables"].values())


def _repo_scripts(command: str) -> list[str]:
    return re.findall(r"(?<![\w/])(scripts/[\w.-]+)", command)


def test_every_repository_script_it_calls_exists_and_is_executable(buildspec):
    commands = [c for phase in buildspec["phases"].values() for c in phase["commands"]]
    called = [script for command in commands for script in _repo_scripts(command)]
    assert called, "buildspec calls no repository script"
    for script in called:
        path = REPO / script
        assert path.is_file(), script
        assert path.stat().st_mode & 0o111, f"{script} is not executable"


def test_every_step_it_asks_of_push_is_a_step_push_knows(buildspec):
    push_text = (REPO / "scripts/push").read_text()
    known_steps = set(re.search(r"^\s+(login\|[\w|]+)\)", push_text, re.MULTILINE).group(1).split("|"))
    for phase in buildspec["phases"].values():
        for command in phase["commands"]:
            if "scripts/push" not in command:
                continue
            words = shlex.split(command.split("scripts/push", 1)[1].split(")")[0].split("|")[0])
            steps = [w for w in words if not w.startswith(("-", "$"))]
            assert steps and set(steps) <= known_steps, command


def test_tests_run_before_publish(buildspec):
    build = " ".join(buildspec["phases"]["build"]["commands"])
    assert "scripts/test.sh" in build
    post = buildspec["phases"]["post_build"]["commands"]
    gate = next(i for i, c in enumerate(post) if "CODEBUILD_BUILD_SUCCEEDING" in c)
    publish = next(i for i, c in enumerate(post) if "publish" in c)
    assert gate < publish


def test_every_option_push_passes_to_build_is_one_build_accepts():
    push_text = (REPO / "scripts/push").read_text()
    build_text = (REPO / "scripts/build.sh").read_text()
    accepted = set(re.findall(r"^\s+(--[\w-]+)\)", build_text, re.MULTILINE))
    passed = set(re.findall(r"(--[\w-]+)", push_text.split("step_build()", 1)[1].split("\n}", 1)[0]))
    assert passed, "step_build passes no options"
    assert passed <= accepted, f"build.sh does not accept {sorted(passed - accepted)}"


RUNNER = REPO / "scripts" / "run-buildspec"


def run_buildspec(
    tmp_path, phases: dict, *extra: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    spec = tmp_path / "buildspec.yml"
    spec.write_text(
        yaml.safe_dump({"version": 0.2, "env": {"variables": {"FROM_FILE": "a"}}, "phases": phases})
    )
    return subprocess.run(
        [sys.executable, str(RUNNER), "--buildspec", str(spec), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_run_buildspec_keeps_variables_across_commands_and_phases(tmp_path):
    done = run_buildspec(
        tmp_path,
        {
            "pre_build": {"commands": ["SET_IN_PRE=b"]},
            "build": {"commands": ['echo "$FROM_FILE $SET_IN_PRE $OVERRIDDEN $CODEBUILD_BUILD_SUCCEEDING"']},
        },
        "--env",
        "OVERRIDDEN=c",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["a b c 1"]


def test_run_buildspec_runs_post_build_after_a_failed_build_as_codebuild_does(tmp_path):
    done = run_buildspec(
        tmp_path,
        {
            "build": {"commands": ["false", "echo never"]},
            "post_build": {"commands": ['echo "post $CODEBUILD_BUILD_SUCCEEDING"']},
        },
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == ["post 0"]
    assert "phase build failed" in done.stderr


def test_run_buildspec_ends_the_build_when_pre_build_fails(tmp_path):
    done = run_buildspec(
        tmp_path,
        {
            "pre_build": {"commands": ["false"]},
            "build": {"commands": ["echo build"]},
            "post_build": {"commands": ["echo post"]},
        },
    )
    assert done.returncode == 1
    assert done.stdout == ""


def test_run_buildspec_takes_the_source_version_from_the_environment_without_git(tmp_path):
    # A source tree without .git (a CodeBuild source download): the variable CodeBuild sets is used.
    sha = "feedface" * 5
    done = run_buildspec(
        tmp_path,
        {"build": {"commands": ['echo "sha=$CODEBUILD_RESOLVED_SOURCE_VERSION"']}},
        env={**os.environ, "CODEBUILD_RESOLVED_SOURCE_VERSION": sha},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"sha={sha}"]


# -- every command the buildspec runs exists ----------------------------------------------------------

# Keywords and builtins of bash, the buildspec's shell (env.shell), and the tools of CodeBuild's
# standard Linux image that the buildspec calls: aws/aws-codebuild-docker-images,
# ubuntu/standard/7.0/Dockerfile installs git (git-core PPA), the AWS CLI v2 and Docker; paste is
# coreutils and bash is the shell of its Ubuntu 22.04 base. Add a tool here only with such a source.
SHELL_KEYWORDS = {"if", "then", "else", "elif", "fi", "while", "until", "do", "done", "!", "{", "}"}
BASH_BUILTINS = {"[", "test", "echo", "exit", "export", "true", "false", ":", "printf", "read", "cd"}
CODEBUILD_STANDARD_TOOLS = {"git", "docker", "aws", "paste", "bash"}
SUBSTITUTION = re.compile(r"\$\(((?:[^()]|\([^()]*\))*)\)")
OPERATORS = {";", "&&", "||", "|", "&", "(", ")", ";;"}


def command_words(command: str) -> list[str]:
    """The words in command position of one shell command line: after assignments and keywords, at
    the start and after every operator, inside every $(...) and every `bash -c '...'`."""
    words = [word for inner in SUBSTITUTION.findall(command) for word in command_words(inner)]
    lexer = shlex.shlex(SUBSTITUTION.sub("SUBSTITUTED", command), posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    tokens = list(lexer)
    at_start = True
    for index, token in enumerate(tokens):
        if token in OPERATORS:
            at_start = True
        elif at_start and not (token in SHELL_KEYWORDS or re.fullmatch(r"[A-Za-z_]\w*=.*", token)):
            words.append(token)
            at_start = False
            if token == "bash" and tokens[index + 1 : index + 2] == ["-c"]:
                words += command_words(tokens[index + 2])
    return words


def test_command_words_finds_commands_in_every_position():
    line = """A=1 B=$(git rev-parse HEAD) b x | c "$(d e)" && if [ -n "$A" ]; then bash -c 'f; g y'; fi"""
    assert command_words(line) == ["git", "d", "b", "c", "[", "bash", "f", "g"]


def test_every_command_the_buildspec_runs_is_a_repository_script_or_on_codebuild_standard(buildspec):
    assert buildspec["env"]["shell"] == "bash", "scripts/run-buildspec runs the phases with bash"
    commands = [c for phase in buildspec["phases"].values() for c in phase["commands"]]
    words = [word for command in commands for word in command_words(command)]
    known = SHELL_KEYWORDS | BASH_BUILTINS | CODEBUILD_STANDARD_TOOLS
    unknown = sorted(
        {w for w in words if w not in known and not (w.startswith("scripts/") and (REPO / w).is_file())}
    )
    assert not unknown, (
        f"buildspec.yml runs commands that are neither repository scripts nor known: {unknown}"
    )
    assert {"git", "paste", "scripts/push", "scripts/test.sh"} <= set(words)


# -- scripts/push: a tag is never made from a failed or malformed Python version ----------------------

TF_VERSION = re.search(r"^tensorflow==([0-9.]+)$", (REPO / "container/pins/python.txt").read_text(), re.M)[1]


def fake_docker(tmp_path: Path, run_prints: str, run_status: int) -> Path:
    """A docker CLI standing in for the engine: scripts/push must not reach a registry or a real image
    here (a missing image would be pulled). It logs every call; `run` prints and exits as told."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {shlex.quote(str(tmp_path / "docker.log"))}\n'
        f'if [ "$1" = run ]; then printf "%s\\n" {shlex.quote(run_prints)}; exit {run_status}; fi\n'
    )
    docker.chmod(0o755)
    return bin_dir


def push(bin_dir: Path, *steps: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        [str(REPO / "scripts/push"), "--registry", "none", "--variants", "cpu", "--sha", "0123456789abcdef",
         *steps],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("run_prints", "run_status", "message"),
    [
        ("", 125, "could not read the Python version of sagemaker-tf-horovod:cpu"),
        ("Python 3.11.2", 0, "reported Python tag 'Python 3.11.2', not py<major><minor>"),
        ("", 0, "reported Python tag '', not py<major><minor>"),
    ],
)
@pytest.mark.parametrize("step", ["tags", "publish"])
def test_push_stops_before_tagging_when_the_python_tag_is_not_known(
    tmp_path, run_prints, run_status, message, step
):
    done = push(fake_docker(tmp_path, run_prints, run_status), step)
    assert done.returncode != 0
    assert message in done.stderr
    assert "registry.invalid" not in done.stdout, "a tag was printed or pushed"
    calls = (tmp_path / "docker.log").read_text().splitlines()
    assert [call.split()[0] for call in calls] == ["run"], (
        f"docker was asked for more than the version: {calls}"
    )


def test_push_tags_say_what_is_inside(tmp_path):
    done = push(fake_docker(tmp_path, "py311", 0), "tags")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"registry.invalid/sagemaker-tf-horovod:{TF_VERSION}-cpu-py311-0123456789ab",
        f"registry.invalid/sagemaker-tf-horovod:{TF_VERSION}-cpu",
    ]
