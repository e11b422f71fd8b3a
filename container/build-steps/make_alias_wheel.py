"""Write a metadata-only wheel that satisfies one distribution name with another.

tf-keras requires the distribution `tensorflow`; the CPU image ships the same TensorFlow as
`tensorflow-cpu` (600 MB smaller, no CUDA kernels). Installing the full `tensorflow` as well would
overwrite the same files and double the download. The alias wheel `tensorflow==<pin>` depends on
`tensorflow-cpu==<pin>` and carries no files, so `pip check` is clean and a user's requirements.txt
naming `tensorflow==<pin>` is already satisfied instead of replacing the CPU build.
"""

import argparse
import base64
import hashlib
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AliasSpec:
    name: str
    version: str
    provided_by: str

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.name):
            raise ValueError(f"alias name {self.name!r} is not a valid distribution name")
        if not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", self.version):
            raise ValueError(f"alias version {self.version!r} is not a valid version")


def pinned_version(constraints: str, name: str) -> str:
    """The version pinned as `name==X` in a pip constraints file's text."""
    for line in constraints.splitlines():
        match = re.fullmatch(rf"\s*{re.escape(name)}\s*==\s*([^\s#;]+)\s*(#.*)?", line)
        if match:
            return match.group(1)
    raise ValueError(f"the constraints file pins no version for {name!r}; add `{name}==<version>`")


def wheel_files(spec: AliasSpec) -> dict[str, str]:
    """Archive path → text of every file in the alias wheel, RECORD excluded."""
    dist_info = f"{spec.name.replace('-', '_')}-{spec.version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {spec.name}\n"
        f"Version: {spec.version}\n"
        f"Summary: {spec.name} provided by {spec.provided_by} (metadata-only alias)\n"
        f"Requires-Dist: {spec.provided_by}=={spec.version}\n"
    )
    wheel = "Wheel-Version: 1.0\nGenerator: make_alias_wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    return {f"{dist_info}/METADATA": metadata, f"{dist_info}/WHEEL": wheel}


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(spec: AliasSpec, out_dir: Path) -> Path:
    files = wheel_files(spec)
    dist_info = next(iter(files)).split("/")[0]
    records = [record_line(path, text.encode()) for path, text in files.items()]
    records.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(records) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel_path = out_dir / f"{spec.name.replace('-', '_')}-{spec.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel_path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="distribution the alias provides, e.g. tensorflow")
    parser.add_argument("--provided-by", required=True, help="distribution that really provides it")
    parser.add_argument("--constraints", required=True, type=Path, help="pip constraints file with the pin")
    parser.add_argument("--out", required=True, type=Path, help="folder for the wheel")
    args = parser.parse_args()
    version = pinned_version(args.constraints.read_text(), args.name)
    if pinned_version(args.constraints.read_text(), args.provided_by) != version:
        parser.error(f"{args.constraints}: pin {args.name} and {args.provided_by} to the same version")
    print(write_wheel(AliasSpec(args.name, version, args.provided_by), args.out))


if __name__ == "__main__":
    main()
