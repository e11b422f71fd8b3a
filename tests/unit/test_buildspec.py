"""buildspec.yml is CodeBuild schema 0.2 and calls only what the repository has."""

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


def run_buildspec(tmp_path, phases: dict, *extra: str) -> subprocess.CompletedProcess:
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
