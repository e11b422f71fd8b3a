"""What kind of program ``sagemaker_program`` names, and the argv each rank runs.

A Python module with a top-level ``def build_model`` is a Keras model module for the managed trainer;
this is decided from its syntax tree, never by importing it (that would import TensorFlow here).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from sagetrain.config.hyperparameters import PROGRAM_KEY, PROGRAM_VAR, TUNING_OBJECTIVE_KEY
from sagetrain.errors import UserError

TRAINER_MODULE = "sagetrain.trainer"


class ProgramKind(Enum):
    PYTHON_SCRIPT = "python_script"
    KERAS_MODEL_MODULE = "keras_model_module"
    SHELL_SCRIPT = "shell_script"
    PYTHON_PACKAGE = "python_package"
    EXECUTABLE = "executable"


@dataclass(frozen=True)
class Program:
    kind: ProgramKind
    name: str  # as sagemaker_program gives it
    path: Path | None  # the file, when there is one
    code_dir: Path


def defines_build_model(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False  # a script with a syntax error is run, so Python reports it with a line number
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "build_model"
        for node in tree.body
    )


def _is_package(code_dir: Path) -> bool:
    return (code_dir / "setup.py").is_file() or (code_dir / "pyproject.toml").is_file()


def classify_program(name: str | None, code_dir: Path) -> Program:
    if not name:
        raise UserError(
            f"hyperparameters.json has no {PROGRAM_KEY}; set it to the file to run, e.g. "
            f'"\\"train.py\\"" (a derived image may set the environment variable {PROGRAM_VAR} instead)'
        )
    path = code_dir / name
    if name.endswith(".py") or (
        not path.exists() and (code_dir / f"{name}.py").is_file() and not _is_package(code_dir)
    ):
        script = path if name.endswith(".py") else code_dir / f"{name}.py"
        if not script.is_file():
            raise UserError(f"sagemaker_program {name!r} does not exist: there is no file {script}")
        source = script.read_text(encoding="utf-8", errors="replace")
        kind = ProgramKind.KERAS_MODEL_MODULE if defines_build_model(source) else ProgramKind.PYTHON_SCRIPT
        return Program(kind, name, script, code_dir)
    if path.is_file():
        kind = ProgramKind.SHELL_SCRIPT if name.endswith(".sh") else ProgramKind.EXECUTABLE
        return Program(kind, name, path, code_dir)
    if _is_package(code_dir) and name.replace(".", "").replace("_", "").isalnum():
        return Program(ProgramKind.PYTHON_PACKAGE, name, None, code_dir)
    raise UserError(f"sagemaker_program {name!r} does not exist: there is no file {path}")


def model_dir_for_tuning(model_dir: str, job_name: str) -> str:
    """Tuning jobs share hyperparameters: as AWS's TF toolkit does, give each job its own S3 model_dir."""
    if model_dir.startswith("/opt/ml"):
        return model_dir
    return f"{model_dir}/{job_name}/model"


def adjusted_user_hyperparameters(
    user_hyperparameters: Mapping[str, Any], all_hyperparameters: Mapping[str, Any], job_name: str | None
) -> dict[str, Any]:
    adjusted = dict(user_hyperparameters)
    model_dir = adjusted.get("model_dir")
    if TUNING_OBJECTIVE_KEY in all_hyperparameters and isinstance(model_dir, str) and job_name:
        adjusted["model_dir"] = model_dir_for_tuning(model_dir, job_name)
    return adjusted


def program_argv(program: Program, user_args: Sequence[str], python: str) -> list[str]:
    args = list(user_args)
    if program.kind is ProgramKind.PYTHON_SCRIPT:
        return [python, str(program.path), *args]
    if program.kind is ProgramKind.KERAS_MODEL_MODULE:
        return [python, "-m", TRAINER_MODULE, str(program.path)]
    if program.kind is ProgramKind.SHELL_SCRIPT:
        return ["/bin/bash", str(program.path), *args]
    if program.kind is ProgramKind.PYTHON_PACKAGE:
        return [python, "-m", program.name, *args]
    assert program.path is not None
    if os.access(program.path, os.X_OK):
        return [str(program.path), *args]
    return ["/bin/sh", str(program.path), *args]
