"""The project's static checks, with its own configuration: mypy (mypy.ini: the package, the local cluster
tool and the benchmarks) and ruff (ruff.toml: lint, complexity <= 10, format) on everything."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def run(*command: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *command], cwd=cwd, capture_output=True, text=True, timeout=240, check=False
    )


def test_the_package_and_the_code_that_imports_it_type_check():
    """mypy.ini: the package, scripts/localcluster and benchmarks/."""
    result = run("mypy", "--config-file", "mypy.ini", "--cache-dir", "/tmp/sagetrain-mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_lint_and_complexity_pass():
    result = run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    result = run("ruff", "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr
