"""Suite-wide collection rules.

tests/integration/image needs TensorFlow and Horovod as built in the image; the container suite runs it
inside the image (tests/container/test_in_image.py). On the host it is collected only when
SAGETRAIN_IN_IMAGE=1, which the image sets.

The order of the run: the tests that need no image first (unit, host integration, and the container
tier's checks that start no container), so that they run while scripts/test.sh builds the image in the
background; then the tests of the CPU image, the slow ones first, so that no worker is left with one at
the end; the GPU image's last, as its build ends last (.ci/run). Under pytest-xdist (`--dist loadgroup`)
the tests of one `xdist_group` run on one worker, one after the other: the unit and host integration
tests share this machine's ports (the host tests pick free ports for sshd or the coordinator, below the
kernel's ephemeral range so that no connection takes one in between, but two of them picking at once
could still meet), so they are one group.
"""

import os
from pathlib import Path

import pytest

collect_ignore_glob = [] if os.environ.get("SAGETRAIN_IN_IMAGE") == "1" else ["integration/image/*"]

TESTS = Path(__file__).resolve().parent
HOST_TIERS = (TESTS / "unit", TESTS / "integration" / "host")


def run_order(item: pytest.Item) -> int:
    needs = set(getattr(item, "fixturenames", ()))
    if "gpu_image" in needs:
        return 3
    if "cpu_image" in needs:
        return 1 if item.get_closest_marker("slow") else 2
    return 0


# Before pytest-xdist's own hook, which reads the groups.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(tier in Path(item.fspath).parents for tier in HOST_TIERS):
            item.add_marker(pytest.mark.xdist_group("host-ports"))
    items.sort(key=run_order)
