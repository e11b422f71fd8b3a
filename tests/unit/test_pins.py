"""The PyPI pins: container/pins/python.txt (the heavy layers) and python-added.txt (the packages added in
a late layer of their own) pin every package exactly, name none twice, and keep TensorBoard and TensorFlow
Text at TensorFlow's release; sources.txt pins each third-party source by tag, commit and archive hash."""

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


def test_tensorflow_text_is_tensorflows_release():
    """TensorFlow Text's ops are compiled against one TensorFlow release: another one's do not load."""
    tensorflow = pins("python.txt")["tensorflow"].split(".")[:2]
    assert pins("python-added.txt")["tensorflow-text"].split(".")[:2] == tensorflow


def test_third_party_sources_pin_a_tag_its_commit_and_its_archives_sha256():
    lines = [
        line.split()
        for line in (PINS / "sources.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines, "sources.txt pins nothing"
    for name, version, tag, commit, sha256, repository in lines:
        assert tag == f"v{version}", f"{name}: tag {tag} is not v{version}"
        assert re.fullmatch(r"[0-9a-f]{40}", commit), f"{name}: {commit} is not a full commit id"
        assert re.fullmatch(r"[0-9a-f]{64}", sha256), f"{name}: {sha256} is not a sha256"
        assert repository.startswith("https://github.com/") and repository.endswith(f"/{name}.git")
