"""buildspec.yml run here by scripts/run-buildspec as a registry-less dry run (SAGETRAIN_REGISTRY=none,
VARIANTS=cpu):

- pre_build + post_build: login and push are printed, not done, and the tags say what is inside.
- pre_build + build: the real build phase. scripts/push builds the CPU image with scripts/build.sh (layer
  cache makes that seconds to a few minutes when nothing changed), then scripts/test.sh runs tests on it.
  In CodeBuild that is the whole container suite; here CONTAINER_TESTS narrows it to SMOKE_TESTS (an
  image check and a single-host training job), so the dry run takes minutes, not the suite's hour.

Guards: the build phase's test run sets SAGETRAIN_BUILDSPEC_TESTS=1, and under it the build-phase dry run
skips itself (it would run this suite inside itself, without end). It also skips under
SAGETRAIN_SKIP_BUILD=1, which promises that the image is used as it is: the build phase builds it.
The source revision is CODEBUILD_RESOLVED_SOURCE_VERSION when set (no .git needed), else git's HEAD.
"""

import os
import re
import subprocess
import sys
import time

import pytest
from cluster import DOCKER
from conftest import DEFAULT_IMAGE, REPO_ROOT, build_ca_certs

REGISTRY = "registry.invalid/sagemaker-tf-horovod"
RUNNER = REPO_ROOT / "scripts" / "run-buildspec"
# pytest -k without spaces: CONTAINER_TESTS reaches scripts/test.sh word-split by the shell.
SMOKE_TESTS = "-m container -k (help_prints_usage)or(single_host_mpi_job)"
SMOKE_COUNT = 2
BUILD_PHASE_TIMEOUT_S = 30 * 60  # a cache miss rebuilds TensorFlow's layers; a cached build takes minutes
# pytest's last line: "==== 2 passed, 1301 deselected in 61.20s (0:01:01) ====".
PYTEST_SUMMARY = re.compile(r"=+ (.+) in [\d.]+s(?: \([\d:]+\))? =+")


def source_sha() -> str:
    from_codebuild = os.environ.get("CODEBUILD_RESOLVED_SOURCE_VERSION")
    if from_codebuild:
        return from_codebuild
    return subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def run_buildspec(phases: str, *env: str, timeout: float) -> subprocess.CompletedProcess:
    command = [sys.executable, str(RUNNER), "--phases", phases,
               "--env", "SAGETRAIN_REGISTRY=none", "--env", "VARIANTS=cpu"]  # fmt: skip
    for assignment in env:
        command += ["--env", assignment]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def test_login_and_publish_dry_run_tag_the_cpu_image_and_push_nothing(cpu_image):
    # The fixture builds it; scripts/push publishes the name build.sh gives it, whatever the suite tests.
    published = DEFAULT_IMAGE
    tags = [f"{REGISTRY}:2.21.0-cpu-py311-{source_sha()[:12]}", f"{REGISTRY}:2.21.0-cpu"]
    try:
        done = run_buildspec("pre_build,post_build", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert f"dry run: aws ecr get-login-password | docker login {REGISTRY.split('/')[0]}" in lines
        assert [line for line in lines if line.startswith("dry run: docker push")] == [
            f"dry run: docker push {tag}" for tag in tags
        ]
        image_id = DOCKER.run(["image", "inspect", "-f", "{{.Id}}", published, *tags]).split()
        assert len(set(image_id)) == 1, "every tag names the CPU image"
    finally:
        DOCKER.run(["image", "rm", *tags], check=False)


@pytest.mark.slow
@pytest.mark.timeout(BUILD_PHASE_TIMEOUT_S + 120)
@pytest.mark.skipif(
    os.environ.get("SAGETRAIN_BUILDSPEC_TESTS") == "1",
    reason="running inside buildspec.yml's build phase: its dry run would run this suite again",
)
@pytest.mark.skipif(
    os.environ.get("SAGETRAIN_SKIP_BUILD") == "1",
    reason="SAGETRAIN_SKIP_BUILD=1 keeps the image as it is, and the build phase builds it",
)
def test_build_phase_dry_run_builds_the_cpu_image_and_runs_the_smoke_tests_on_it(cpu_image):
    began = time.monotonic()
    done = run_buildspec(
        "pre_build,build",
        f"CONTAINER_TESTS={SMOKE_TESTS}",
        f"SAGETRAIN_CA_CERTS={build_ca_certs() or ''}",
        timeout=BUILD_PHASE_TIMEOUT_S,
    )
    seconds = time.monotonic() - began
    output = done.stdout + done.stderr
    print(f"build phase dry run: exit {done.returncode} in {seconds:.0f} s")
    assert done.returncode == 0, output[-6000:]
    assert "phase build failed" not in done.stderr, output[-6000:]
    lines = done.stdout.splitlines()
    # No registry: no cache image is pulled, the build is local, and nothing is pushed.
    assert f"push: no cache image {REGISTRY}:2.21.0-cpu; building without remote cache" in lines
    assert any(line.startswith(f"build.sh: built {DEFAULT_IMAGE} ") for line in lines), output[-6000:]
    assert not any(line.startswith("dry run: docker push") for line in lines)
    # The build phase's own test run: exactly the smoke selection, all passed, on the image just built.
    # (Its pytest-xdist workers deselect, so the summary need not count the deselected tests.)
    summaries = [found.group(1) for line in lines if (found := PYTEST_SUMMARY.fullmatch(line))]
    assert summaries, output[-6000:]
    counts = {outcome: int(count) for count, outcome in re.findall(r"(\d+) (\w+)", summaries[-1])}
    counts.pop("deselected", None)
    assert counts == {"passed": SMOKE_COUNT}, output[-6000:]
