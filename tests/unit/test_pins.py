"""The PyPI pins: container/pins/python.txt (the heavy layers) and python-added.txt (the packages added in
a late layer of their own) pin every package exactly, name none twice, and keep TensorBoard at
TensorFlow's release."""

import re
from pathlib import Path

PINS = Path(__file__).resolve().parents[2] / "container" / "pins"


def pins(name: str) -> dict[str, str]:
    found = {}
    for line in (PINS / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9._-]+)==([0-9][^\s]*)", line)
            assert match, f"{name}: {line!r} is not an exact pin"
            found[match.group(1).lower()] = match.group(2)
    return found


def test_no_package_is_pinned_in_both_files():
    assert set(pins("python.txt")) & set(pins("python-added.txt")) == set()


def test_tensorboard_is_tensorflows_release():
    tensorflow = pins("python.txt")["tensorflow"].split(".")[:2]
    assert pins("python-added.txt")["tensorboard"].split(".")[:2] == tensorflow
