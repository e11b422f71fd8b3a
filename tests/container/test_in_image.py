"""Run tests/integration/image inside the image: TensorFlow, Horovod and OpenMPI exactly as shipped.

The image carries no pytest; this machine's pytest (pure Python, same Python 3.11) is mounted next to
the read-only work tree and put on PYTHONPATH, so the image under test stays unchanged. Each module runs
in a container of its own, so that pytest-xdist's workers can run several side by side: most of their
time goes to starting TensorFlow and waiting on other ranks, which one process leaves a core idle for."""

import importlib.metadata
import re
import shutil
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_in_image

TEST_DISTRIBUTIONS = ["pytest", "pluggy", "iniconfig", "pytest-timeout"]
IMAGE_TESTS = REPO_ROOT / "tests" / "integration" / "image"
MODULES = sorted(path.name for path in IMAGE_TESTS.glob("test_*.py"))
RUN_DEADLINE_S = 1800  # one module, on 2 shared cores


def copy_distributions(names: list[str], target: Path) -> None:
    for name in names:
        distribution = importlib.metadata.distribution(name)
        for relative in distribution.files or []:
            source = Path(distribution.locate_file(relative))
            if relative.parts[0] == ".." or "__pycache__" in relative.parts or not source.is_file():
                continue
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)


@pytest.fixture(scope="session")
def test_deps(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("in-image-test-deps")
    copy_distributions(TEST_DISTRIBUTIONS, target)
    return target


def test_the_in_image_suite_has_modules_to_run():
    """An empty list would leave the test below with nothing to run, which pytest only skips."""
    assert "test_image_horovod_basics.py" in MODULES, f"{IMAGE_TESTS} holds {MODULES}"


@pytest.mark.slow
@pytest.mark.timeout(RUN_DEADLINE_S + 120)
@pytest.mark.parametrize("module", MODULES)
def test_integration_image_module_passes_inside_the_image(
    docker_client, cpu_image, test_deps, internal_network, module
):
    command = [
        "python", "-m", "pytest", "-p", "no:cacheprovider", "-o", "pythonpath=", "-v", "--durations=10",
        "--rootdir", "/repo", f"/repo/tests/integration/image/{module}",
    ]  # fmt: skip
    result = run_in_image(
        docker_client,
        cpu_image,
        command,
        timeout_s=RUN_DEADLINE_S,
        volumes={
            str(REPO_ROOT): {"bind": "/repo", "mode": "ro"},
            str(test_deps): {"bind": "/opt/test-deps", "mode": "ro"},
        },
        environment={"PYTHONPATH": "/opt/test-deps"},
        entrypoint=["bash", "-c", 'cd /repo && exec "$@"', "in-image"],
        # An interface besides lo, as in a real job: Horovod's Gloo controller crashes with lo alone.
        network=internal_network,
    )
    print(result.output)
    summary = result.output.strip().splitlines()[-1] if result.output.strip() else ""
    assert result.exit_code == 0, f"in-image pytest of {module} exited {result.exit_code}: {summary}"
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 1, summary
    assert "failed" not in summary and "error" not in summary, summary
