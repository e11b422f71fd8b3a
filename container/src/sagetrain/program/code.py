"""Locate the user's code, install what it needs, and classify the program (on every host, before
launch)."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

from sagetrain.config.hyperparameters import JobSettings
from sagetrain.config.job import JobConfig
from sagetrain.config.paths import Paths
from sagetrain.errors import PlatformError, UserError
from sagetrain.program.archive import extract_archive
from sagetrain.program.kind import TRAINER_MODULE, Program, ProgramKind, classify_program

log = logging.getLogger(__name__)


def _is_archive(location: str) -> bool:
    return location.startswith("s3://") or location.endswith((".tar.gz", ".tgz"))


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
    if paths.code_dir.is_dir() and any(paths.code_dir.iterdir()):
        # As sagemaker_training does: code already there (a restart on the same tree) is not replaced.
        log.info("%s is not empty: not unpacking %s again", paths.code_dir, source)
        return paths.code_dir
    if not source.startswith("s3://"):
        extract_archive(Path(source), paths.code_dir, source)
        return paths.code_dir
    # The toolkit's S3 client (its region and endpoint settings); imported here because it pulls in boto3.
    from sagemaker_training import files

    with tempfile.TemporaryDirectory(prefix="sagetrain-code-") as scratch:
        archive = Path(scratch) / "sourcedir.tar.gz"
        try:
            files.s3_download(source, str(archive))
        except Exception as error:  # boto3 raises many types; all mean the same to the user
            raise UserError(f"cannot fetch sagemaker_submit_directory {source}: {error}") from None
        extract_archive(archive, paths.code_dir, source)
    return paths.code_dir


def _pip(args: list[str], code_dir: Path, what: str) -> None:
    # No overall timeout: a large requirements file may rightly take many minutes. pip's own socket
    # timeout (15 s) and retries bound a stalled download, and SageMaker's MaxRuntimeInSeconds the rest.
    command = [sys.executable, "-m", "pip", "install", "--no-input", *args]
    log.info("installing %s: %s", what, " ".join(command))
    result = subprocess.run(command, cwd=code_dir, check=False)
    if result.returncode != 0:
        raise UserError(
            f"installing {what} failed (pip exit code {result.returncode}); see pip's messages above"
        )


def install_requirements(code_dir: Path) -> None:
    requirements = code_dir / "requirements.txt"
    if requirements.is_file():
        _pip(["-r", str(requirements)], code_dir, str(requirements))


def install_package(code_dir: Path) -> None:
    _pip([str(code_dir)], code_dir, f"the package in {code_dir}")


def prepare_program(config: JobConfig) -> Program:
    """The program, with its code in place and its requirements (and its package) installed."""
    code_dir = locate_code(config.paths, config.settings)
    program = classify_program(config.settings.program, code_dir)
    if program.kind is ProgramKind.KERAS_MODEL_MODULE and importlib.util.find_spec(TRAINER_MODULE) is None:
        raise PlatformError(
            f"{program.name} is a Keras model module (it defines build_model), but the managed trainer "
            f"{TRAINER_MODULE} is not available in this image"
        )
    install_requirements(code_dir)
    if program.kind is ProgramKind.PYTHON_PACKAGE:
        install_package(code_dir)
    return program
