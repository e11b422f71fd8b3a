"""Locate the user's code, install what it needs, and classify the program (on every host, before
launch)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from sagetrain.atomic_file import write_atomically
from sagetrain.config.hyperparameters import JobSettings
from sagetrain.config.job import JobConfig
from sagetrain.config.paths import Paths
from sagetrain.errors import PlatformError, SagetrainError, UserError
from sagetrain.program.archive import VOLUME_FULL, ArchiveLimits, extract_archive
from sagetrain.program.kind import TRAINER_MODULE, Program, ProgramKind, classify_program
from sagetrain.program.requirements import install_package, install_requirements

log = logging.getLogger(__name__)


def _is_archive(location: str) -> bool:
    return location.startswith("s3://") or location.endswith((".tar.gz", ".tgz"))


@dataclass(frozen=True)
class Unpacked:
    """The record next to the code folder: which archive it holds, and whether unpacking it finished."""

    source: str
    complete: bool


class CodeState(Enum):
    UNPACKED = "unpacked"  # a finished unpacking of this archive: used as it is
    FOREIGN = "foreign"  # files no unpacking of ours put there (the image's, the user's): used as they are
    TO_UNPACK = "to unpack"  # nothing there, or what an unfinished unpacking or another archive's left


def code_state(has_files: bool, record: Unpacked | None, source: str) -> CodeState:
    """What to do with the code folder before unpacking ``source`` into it. Pure."""
    if has_files and record == Unpacked(source, complete=True):
        return CodeState.UNPACKED
    if record is None and has_files:
        # As sagemaker_training does: code put there another way is used, not replaced.
        return CodeState.FOREIGN
    return CodeState.TO_UNPACK


def record_path(code_dir: Path) -> Path:
    # Next to the code folder, not in it: the archive cannot bring it, the program does not see it.
    return code_dir.with_name(f".{code_dir.name}.sagetrain-unpacked")


def read_record(code_dir: Path) -> Unpacked | None:
    try:
        fields = json.loads(record_path(code_dir).read_text(encoding="utf-8"))
        return Unpacked(str(fields["source"]), fields["complete"] is True)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError):
        return Unpacked("", complete=False)  # ours by its name, and not a finished unpacking


def write_record(code_dir: Path, record: Unpacked) -> None:
    write_atomically(record_path(code_dir), json.dumps(dataclasses.asdict(record)))


def _staging(code_dir: Path, mounted: bool) -> Path:
    """An empty folder on the code folder's volume, from which renaming moves the code into place."""
    staging = code_dir.with_name(f".{code_dir.name}.sagetrain-unpacking")
    shutil.rmtree(staging, ignore_errors=True)  # what an interrupted unpacking left
    if mounted:
        # A volume mounted on the code folder: nothing can be renamed into it from outside.
        return Path(tempfile.mkdtemp(prefix=".sagetrain-unpacking-", dir=code_dir))
    staging.mkdir()
    return staging


def _empty(folder: Path) -> None:
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _move_into_place(staging: Path, code_dir: Path, mounted: bool) -> None:
    if mounted:
        for entry in staging.iterdir():
            entry.rename(code_dir / entry.name)
    else:
        staging.rename(code_dir)  # onto a missing or empty folder, in one step


def _placing_failure(source: str, code_dir: Path, error: OSError) -> SagetrainError:
    if error.errno in VOLUME_FULL:
        return UserError(
            f"the code folder's volume is full: cannot unpack the code archive {source} into {code_dir}; "
            "give the job a larger volume (VolumeSizeInGB) or a smaller archive"
        )
    return PlatformError(f"cannot unpack the code archive {source} into {code_dir} ({error.strerror})")


def unpack_code(
    archive: Path, code_dir: Path, source: str, limits: ArchiveLimits, *, mounted: bool | None = None
) -> None:
    """Unpack ``archive`` (``source`` names it) into ``code_dir`` so that the folder holds all of it or
    nothing of it: into a folder of its own first, moved into place once every member is in and checked.
    The record next to the code folder says the unpacking finished only then; until then it says one is
    under way, so that a restart clears what it left instead of running it. What ``code_dir`` holds is
    removed: call this only when code_state says TO_UNPACK. ``mounted``: whether a volume is mounted on
    ``code_dir`` (looked up when not given)."""
    mounted = code_dir.is_mount() if mounted is None else mounted
    log.info("unpacking %s into %s", source, code_dir)
    try:
        write_record(code_dir, Unpacked(source, complete=False))
        _empty(code_dir)  # nothing, or what an unpacking of ours left
        staging = _staging(code_dir, mounted)
        try:
            tally = extract_archive(archive, staging, source, limits)
            _move_into_place(staging, code_dir, mounted)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # after a refusal; the next start retries it too
        write_record(code_dir, Unpacked(source, complete=True))
    except OSError as error:
        raise _placing_failure(source, code_dir, error) from None
    members = f"{tally.members:,} member" + ("" if tally.members == 1 else "s")
    log.info("unpacked %s: %s, %s bytes", source, members, f"{tally.size:,}")


def locate_code(paths: Paths, settings: JobSettings) -> Path:
    """The folder holding the program: /opt/ml/code, or sagemaker_submit_directory unpacked there."""
    source = settings.submit_directory
    if not source:
        return paths.code_dir
    if not _is_archive(source):
        folder = Path(source)
        if not folder.is_dir():
            raise UserError(
                f"hyperparameter sagemaker_submit_directory {source!r} is not a folder, "
                "a .tar.gz or an s3:// URI"
            )
        return folder
    if not source.startswith("s3://") and not Path(source).is_file():
        raise UserError(f"hyperparameter sagemaker_submit_directory {source!r} does not exist")
    code_dir = paths.code_dir
    state = code_state(code_dir.is_dir() and any(code_dir.iterdir()), read_record(code_dir), source)
    if state is CodeState.UNPACKED:
        log.info("%s holds %s, unpacked by an earlier start: not unpacking it again", code_dir, source)
        return code_dir
    if state is CodeState.FOREIGN:
        log.info("%s holds files not unpacked by us: using them, not unpacking %s", code_dir, source)
        return code_dir
    limits = ArchiveLimits.of(settings.launch)
    if not source.startswith("s3://"):
        unpack_code(Path(source), code_dir, source, limits)
        return code_dir
    # The toolkit's S3 client (its region and endpoint settings); imported here because it pulls in boto3.
    from sagemaker_training import files

    with tempfile.TemporaryDirectory(prefix="sagetrain-code-") as scratch:
        archive = Path(scratch) / "sourcedir.tar.gz"
        try:
            files.s3_download(source, str(archive))
        except Exception as error:  # boto3 raises many types; all mean the same to the user
            raise UserError(f"cannot fetch sagemaker_submit_directory {source}: {error}") from None
        unpack_code(archive, code_dir, source, limits)
    return code_dir


def prepare_program(config: JobConfig, environ: Mapping[str, str]) -> Program:
    """The program, with its code in place and its requirements (and its package) installed, with
    pip's settings and proxies from ``environ``."""
    code_dir = locate_code(config.paths, config.settings)
    program = classify_program(config.settings.program, code_dir)
    if program.kind is ProgramKind.KERAS_MODEL_MODULE and importlib.util.find_spec(TRAINER_MODULE) is None:
        raise PlatformError(
            f"{program.name} is a Keras model module (it defines build_model), but the managed trainer "
            f"{TRAINER_MODULE} is not available in this image"
        )
    install_requirements(code_dir, environ)
    if program.kind is ProgramKind.PYTHON_PACKAGE:
        install_package(code_dir, environ)
    return program
