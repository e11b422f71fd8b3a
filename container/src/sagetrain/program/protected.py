"""The packages the image was built around, which the user's requirements may not replace: what pip would
install (its ``--dry-run --report``) is checked against them before anything is installed, and the real
install is constrained to them (``pip install -c``) as well.

Their versions are those installed, read at run time: the image's pins are not repeated here. Each has a
reason, which the refusal quotes.
"""

from __future__ import annotations

import importlib.metadata
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sagetrain.program.package_index import without_credentials

# name (canonical) -> why the image's own release must stay, as the refusal says it after the version.
PROTECTED_REASONS: Mapping[str, str] = {
    # Horovod's library is compiled against TensorFlow's C++ ABI; in the CPU image `tensorflow` is a
    # metadata-only alias of tensorflow-cpu (container/build-steps/make_alias_wheel.py), which a real
    # tensorflow would overwrite file by file.
    "tensorflow": "the TensorFlow the image's Horovod is compiled against",
    "tensorflow-cpu": "the TensorFlow the image's Horovod is compiled against",
    # container/keras/patches: multi-worker fit, the chief's file writes, Keras 2 spellings.
    "keras": "patched in the image for multi-worker fit and Keras 2 spellings",
    # The legacy-Keras switch (sagetrain/legacy_keras.py) and Horovod's patches use it with TensorFlow.
    "tf-keras": "the legacy-Keras switch's Keras, the release made for the image's TensorFlow",
    # Built from source with container/horovod/build-patches and python-patches; PyPI's cannot be
    # compiled against this TensorFlow and lacks the Keras 3 fixes.
    "horovod": "built in the image from source with its patches, for its TensorFlow and Open MPI",
    # Compiled extensions (TensorFlow, h5py, ml-dtypes, scipy) are built against its ABI.
    "numpy": "TensorFlow, h5py and ml-dtypes are compiled against it",
    # TensorFlow's generated protocol buffer code needs this runtime: another release breaks
    # `import tensorflow` (sagemaker-training 4.8.3's protobuf 3.20.3 does).
    "protobuf": "TensorFlow's generated code needs this release",
    "h5py": "compiled against the image's numpy; Keras reads and writes .h5 files with it",
    "ml-dtypes": "TensorFlow's bfloat16 and float8 types, compiled against the image's numpy",
    # TensorFlow 2.21 does not depend on it; the image adds the matching release (pins/python-added.txt).
    "tensorboard": "the release of the image's TensorFlow, for tf.summary and Keras' TensorBoard callback",
    # Its extension links the image's Open MPI (a wheel from PyPI brings its own MPI, or none).
    "mpi4py": "compiled against the image's Open MPI",
    # Built in the image from its sdist; every process's SM_* variables come from it.
    "sagemaker-training": "the toolkit every process's SM_* variables come from",
    # launch/coordinator/trust.py: the hosts prove membership of the job with SPAKE2 over cryptography.
    "spake2": "the job's hosts prove membership of the job with it",
    "cryptography": "the job's hosts prove membership of the job with it (through spake2)",
    # This package: it installs these requirements and launches the job.
    "sagetrain": "the image's launcher",
}
# The GPU image's CUDA libraries (nvidia-cublas-cu12, nvidia-nccl-cu12, ...): TensorFlow loads them, and
# Horovod's library finds NCCL and the CUDA runtime in them (its rpath names their folders).
NVIDIA_PREFIX = "nvidia-"
NVIDIA_REASON = "a CUDA library the image's TensorFlow and Horovod load"
# Distributions that install the same modules as a protected one, over its files: the GPU image has no
# tensorflow-cpu installed, but tensorflow-cpu would still overwrite its tensorflow.
SAME_MODULES: Mapping[str, str] = {
    "tensorflow": "tensorflow-cpu",
    "tensorflow-cpu": "tensorflow",
    "tensorflow-gpu": "tensorflow",
    "tensorflow-intel": "tensorflow",
    "tf-nightly": "tensorflow",
    "tf-nightly-cpu": "tensorflow",
    "keras-nightly": "keras",
    "tf-keras-nightly": "tf-keras",
}


@dataclass(frozen=True)
class Protected:
    name: str  # canonical
    version: str  # as installed
    reason: str


def protected_packages(installed: Mapping[str, str]) -> dict[str, Protected]:
    """The protected packages among ``installed`` ({canonical name: version}), by name. Pure."""
    found = {}
    for name, version in installed.items():
        reason = PROTECTED_REASONS.get(name) or (NVIDIA_REASON if name.startswith(NVIDIA_PREFIX) else None)
        if reason is not None:
            found[name] = Protected(name, version, reason)
    return found


def installed_distributions() -> dict[str, str]:
    """{canonical name: version} of what is installed for this interpreter (the environment pip installs
    into)."""
    installed: dict[str, str] = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            installed.setdefault(canonicalize_name(name), distribution.version)
    return installed


def constraints_text(protected: Iterable[Protected]) -> str:
    """A pip constraints file pinning each protected package to its installed version. Pure."""
    return "".join(
        f"{package.name}=={package.version}\n" for package in sorted(protected, key=lambda p: p.name)
    )


@dataclass(frozen=True)
class Planned:
    """One distribution pip's report says it would install."""

    name: str  # canonical
    version: str
    requested: bool  # named by the requirements themselves, not pulled in by one
    source: str  # the file or URL the requirement named (shown), "" when it came from an index
    requires: tuple[str, ...] = ()  # its Requires-Dist lines
    extras: tuple[str, ...] = ()  # the extras the requirements asked of it


class UnreadableReport(ValueError):
    """pip's report is not what its version "1" format says."""


def _source(item: Mapping[str, Any]) -> str:
    if not item.get("is_direct"):
        return ""
    url = str(item.get("download_info", {}).get("url", ""))
    return url.removeprefix("file://") if url.startswith("file://") else without_credentials(url)


def planned_installs(report: Mapping[str, Any]) -> tuple[Planned, ...]:
    """What pip's installation report (``pip install --dry-run --report``, format "1") would install."""
    if report.get("version") != "1":
        raise UnreadableReport(f"pip's report has version {report.get('version')!r}, not '1'")
    try:
        return tuple(
            Planned(
                name=canonicalize_name(item["metadata"]["name"]),
                version=str(item["metadata"]["version"]),
                requested=bool(item.get("requested")),
                source=_source(item),
                requires=tuple(item["metadata"].get("requires_dist") or ()),
                extras=tuple(item.get("requested_extras") or ()),
            )
            for item in report["install"]
        )
    except (KeyError, TypeError, AttributeError) as error:
        raise UnreadableReport(f"pip's report lacks {error}") from None


def _same_version(first: str, second: str) -> bool:
    try:
        return Version(first) == Version(second)
    except InvalidVersion:
        return first == second


@dataclass(frozen=True)
class Replacement:
    """A planned install that would replace a protected package, and the requirements that lead to it:
    ``path`` runs from a requested distribution to the one before ``planned`` (empty when ``planned`` was
    itself requested, or when no path was found)."""

    planned: Planned
    protected: Protected
    path: tuple[Planned, ...] = ()


def _needs(
    parent: Planned, extras: Iterable[str], environment: Mapping[str, str]
) -> dict[str, frozenset[str]]:
    """{name: extras asked of it} for what ``parent`` needs where pip resolved it (its markers evaluated
    in pip's environment, with the extras asked of ``parent``)."""
    needed: dict[str, frozenset[str]] = {}
    for line in parent.requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        marker = requirement.marker
        if marker is not None and not any(
            marker.evaluate({**environment, "extra": extra}) for extra in ("", *extras)
        ):
            continue
        name = canonicalize_name(requirement.name)
        needed[name] = needed.get(name, frozenset()) | frozenset(requirement.extras)
    return needed


def requirement_path(
    planned: Sequence[Planned], target: str, environment: Mapping[str, str]
) -> tuple[Planned, ...]:
    """The shortest chain of planned installs from a requested one to (not including) ``target``, each
    needing the next; empty when ``target`` was requested or nothing planned needs it. Pure."""
    by_name = {item.name: item for item in planned}
    queue: deque[tuple[Planned, tuple[str, ...], tuple[Planned, ...]]] = deque(
        (item, item.extras, (item,)) for item in planned if item.requested
    )
    seen = {item.name for item in planned if item.requested}
    if target in seen:
        return ()
    while queue:
        item, extras, path = queue.popleft()
        for name, asked in _needs(item, extras, environment).items():
            if name == target:
                return path
            if name in by_name and name not in seen:
                seen.add(name)
                queue.append((by_name[name], tuple(asked), (*path, by_name[name])))
    return ()


def replacements(
    planned: Sequence[Planned], protected: Mapping[str, Protected], environment: Mapping[str, str]
) -> list[Replacement]:
    """Each planned install that would replace a protected package (another version, or the same one
    reinstalled over the image's patched or compiled copy, or another distribution of its modules),
    requested ones first. Pure."""
    found = []
    for item in planned:
        own = protected.get(item.name) or protected.get(SAME_MODULES.get(item.name, ""))
        if own is not None:
            found.append(Replacement(item, own, requirement_path(planned, item.name, environment)))
    return sorted(found, key=lambda replacement: not replacement.planned.requested)


def _as_asked(item: Planned) -> str:
    return f"{item.name} {item.version}" + (f" ({item.source})" if item.source else "")


def refusal(what: str, found: Sequence[Replacement]) -> str | None:
    """One sentence refusing ``what`` (the requirements file, the package) for the first replacement in
    ``found``, naming the others; None when there is none. Pure."""
    if not found:
        return None
    first, *others = found
    planned, own = first.planned, first.protected
    image_has = f"the image's {own.name} {own.version} ({own.reason})"
    also = ""
    if others:
        listed = ", ".join(
            f"{other.protected.name} {other.protected.version} (with {other.planned.version})"
            for other in others
        )
        also = f", and also its {listed}"
    instead = f"build a derived image (FROM this one) to train with {planned.name} {planned.version}"
    if planned.requested:
        asked = _as_asked(planned)
        return f"{what} asks for {asked}, which would replace {image_has}{also}; remove it, or {instead}"
    if not first.path:  # pip's report names nothing that needs it
        return (
            f"{what} would install {_as_asked(planned)}, which would replace {image_has}{also}; remove the "
            f"requirement that needs it, or {instead}"
        )
    root, *through = first.path
    via = f" (through {', '.join(f'{item.name} {item.version}' for item in through)})" if through else ""
    return (
        f"{what} asks for {_as_asked(root)}, which needs {planned.name} {planned.version}{via}: that would "
        f"replace {image_has}{also}; ask for a release of {root.name} that works with {own.name} "
        f"{own.version}, or {instead}"
    )
