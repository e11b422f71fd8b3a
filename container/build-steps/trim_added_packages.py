"""Trim the packages container/pins/python-added.txt installs, in the step that installs them, of what no
program of the image runs; prints what it removed and what it saved.

- Test suites: folders named ``tests`` or ``test`` inside these distributions (pandas/tests alone is
  46 MB). Nothing imports them; their modules are the packages' own test cases, run by their developers.
  Modules with "testing" helpers that code imports (``pandas.testing``, ``tensorflow_datasets.testing``)
  are not such folders and stay.
- The AWS CLI's own copy of botocore (awscli >= 1.46 carries one): its service models are written
  gzip-compressed, as botocore's own wheel ships them. Its loader reads ``.json.gz`` as it reads
  ``.json`` (``_JSON_OPEN_METHODS``), and a model is loaded here afterwards to prove it.
- Symbol tables of these distributions' shared objects (``strip --strip-all``; TensorFlow Text's ops,
  pyarrow, OpenCV: ~90 MB): no loader reads them. ld.so and dlsym use the dynamic symbol table, which
  strip keeps. The runtime has no binutils: ``--tools-root`` names a mounted root that has (the
  Dockerfile's ``binutils`` stage), whose ``strip`` runs with that root's libraries.

Run by the image's Python: ``python trim_added_packages.py --requirements python-added.txt
[--tools-root DIR]``.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

TEST_FOLDERS = frozenset({"tests", "test"})
# botocore compresses these two of each service's model files in its own wheel (the largest ones).
COMPRESSED_MODELS = ("service-2.json", "endpoint-rule-set-1.json")
AWSCLI_BOTOCORE = ("awscli", "botocore", "data")


def pinned_names(requirements: str) -> list[str]:
    """Distribution names of a pip requirements file of exact pins."""
    names = []
    for line in requirements.splitlines():
        match = re.match(r"\s*([A-Za-z0-9._-]+)\s*==", line.split("#", 1)[0])
        if match:
            names.append(match.group(1))
    return names


def test_folders(files: Iterable[str]) -> set[str]:
    """The test-suite folders among a distribution's files (RECORD paths, relative to site-packages):
    the shallowest folder named tests/test on each path, never a top-level one (a distribution that is
    itself named tests is not a test suite of another)."""
    found = set()
    for name in files:
        parts = Path(name).parts
        for depth, part in enumerate(parts[:-1]):
            if depth > 0 and part in TEST_FOLDERS and not parts[0].endswith((".dist-info", ".data")):
                found.add(str(Path(*parts[: depth + 1])))
                break
    return found


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def remove_test_suites(site: Path, names: Iterable[str]) -> Iterator[tuple[str, int]]:
    for name in names:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            sys.exit(f"trim_added_packages: {name} is pinned but not installed")
        for folder in sorted(test_folders(str(file) for file in files)):
            path = site / folder
            if path.is_dir():
                size = folder_bytes(path)
                shutil.rmtree(path)
                yield folder, size


def shared_objects(site: Path, names: Iterable[str]) -> list[Path]:
    """The ELF shared objects among these distributions' files (``*.so``, ``*.so.N``)."""
    found = []
    for name in names:
        for file in importlib.metadata.distribution(name).files or []:
            path = site / file
            if re.search(r"\.so(\.[0-9]+)*$", path.name) and path.is_file() and not path.is_symlink():
                found.append(path)
    return sorted(found)


def strip_symbol_tables(libraries: Iterable[Path], tools_root: Path) -> int:
    """Bytes saved by ``strip --strip-all`` on each library, run from ``tools_root`` with its libraries."""
    strip = tools_root / "usr" / "bin" / "strip"
    env = {"LD_LIBRARY_PATH": str(tools_root / "usr" / "lib" / "x86_64-linux-gnu"), "PATH": "/usr/bin:/bin"}
    saved = 0
    for library in libraries:
        before = library.stat().st_size
        subprocess.run([str(strip), "--strip-all", str(library)], env=env, check=True)
        saved += before - library.stat().st_size
    return saved


def compress_awscli_models(site: Path) -> int:
    """Bytes saved by compressing the AWS CLI's copy of botocore's service models; 0 without one."""
    data = site.joinpath(*AWSCLI_BOTOCORE)
    saved = 0
    for model in sorted(path for name in COMPRESSED_MODELS for path in data.glob(f"*/*/{name}")):
        raw = model.read_bytes()
        packed = gzip.compress(raw, compresslevel=9, mtime=0)
        model.with_name(model.name + ".gz").write_bytes(packed)
        model.unlink()
        saved += len(raw) - len(packed)
    if saved:
        # The CLI's own loader, on a model of each kind: it must read what was written.
        check = (
            "from awscli.botocore.session import Session; s = Session(); "
            "print(len(s.get_service_model('s3').operation_names), 'operations in s3'); "
            "s.create_client('sts', region_name='us-east-1')"
        )
        subprocess.run([sys.executable, "-c", check], check=True)
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--requirements", type=Path, required=True, help="container/pins/python-added.txt")
    parser.add_argument("--site", type=Path, help="site-packages (default: this Python's purelib)")
    parser.add_argument("--tools-root", type=Path, help="a root with binutils' strip, to strip symbol tables")
    args = parser.parse_args()
    import sysconfig

    site = args.site or Path(sysconfig.get_paths()["purelib"])
    names = pinned_names(args.requirements.read_text())
    saved = 0
    for folder, size in remove_test_suites(site, names):
        print(f"trim_added_packages: removed {folder} ({size / 1e6:.1f} MB)")
        saved += size
    models = compress_awscli_models(site)
    if models:
        print(f"trim_added_packages: compressed the AWS CLI's botocore models ({models / 1e6:.0f} MB saved)")
    if args.tools_root:
        libraries = shared_objects(site, names)
        symbols = strip_symbol_tables(libraries, args.tools_root)
        print(f"trim_added_packages: stripped {len(libraries)} shared objects ({symbols / 1e6:.0f} MB saved)")
        saved += symbols
    print(f"trim_added_packages: saved {(saved + models) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
