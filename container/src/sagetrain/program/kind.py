"""What kind of program ``sagemaker_program`` names, and the argv each rank runs.

A Python module with a top-level ``def build_model`` is a Keras model module for the managed trainer;
this is decided from its syntax tree, never by importing it (that would import TensorFlow here).
"""

from __future__ import annotations

import ast
import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from sagetrain.config.hyperparameters import PROGRAM_KEY, PROGRAM_VAR, TUNING_OBJECTIVE_KEY
from sagetrain.errors import UserError

TRAINER_MODULE = "sagetrain.trainer"
# What makes a Python module a Keras model module, and the optional functions of one.
MODEL_FUNCTION = "build_model"
MODULE_HOOKS = ("input_fn", "parse_record")


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
    why: str = ""  # why it runs the way it does, for the log and the dry run
    near_miss: str = ""  # a Python module that looks meant as a Keras model module and is not one: the fix


@dataclass(frozen=True)
class ModuleShape:
    """What a Python module defines at its top level, read from its syntax tree."""

    functions: frozenset[str]  # def and async def
    other_names: frozenset[str]  # assigned or imported
    nested_model_function: bool  # a def build_model inside a class or a function
    syntax_error: str = ""

    @property
    def is_model_module(self) -> bool:
        return MODEL_FUNCTION in self.functions


def module_shape(source: str) -> ModuleShape:
    """The shape of a module's source. Pure: parsed, never imported (that would import TensorFlow)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        # A script with a syntax error is run, so that Python reports it with its line number.
        return ModuleShape(frozenset(), frozenset(), False, f"{error.msg} (line {error.lineno})")
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    others: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            others.update(target.id for target in targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            others.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    nested = any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == MODEL_FUNCTION
        for top in tree.body
        if not isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(top)
    )
    return ModuleShape(frozenset(functions), frozenset(others), nested)


def defines_build_model(source: str) -> bool:
    return module_shape(source).is_model_module


def near_miss(name: str, shape: ModuleShape) -> str:
    """When a module that is not a model module looks meant as one (a misspelt build_model, a hook
    without it, build_model not defined by a top-level def): what it runs as, and the likely fix; else
    "". Pure."""
    if shape.is_model_module or shape.syntax_error:
        return ""
    runs_as = f"{name} runs as a plain script, not as a Keras model module in the managed trainer"
    close = difflib.get_close_matches(MODEL_FUNCTION, sorted(shape.functions), n=1, cutoff=0.75)
    alike = [
        f for f in sorted(shape.functions) if f.replace("_", "").lower() == MODEL_FUNCTION.replace("_", "")
    ]
    misspelt = (alike or close or [""])[0]
    if misspelt:
        return (
            f"{name} defines {misspelt} but no {MODEL_FUNCTION}, so {runs_as}; if it is one, rename "
            f"{misspelt} to {MODEL_FUNCTION}"
        )
    if MODEL_FUNCTION in shape.other_names:
        return (
            f"{name} assigns or imports {MODEL_FUNCTION} instead of defining it with a top-level def, so "
            f"{runs_as}; if it is one, define {MODEL_FUNCTION}(hp) in it"
        )
    if shape.nested_model_function:
        return (
            f"{name} defines {MODEL_FUNCTION} inside a class or function, not at its top level, so "
            f"{runs_as}; if it is one, move {MODEL_FUNCTION}(hp) to the top level"
        )
    hooks = [hook for hook in MODULE_HOOKS if hook in shape.functions]
    if hooks:
        return (
            f"{name} defines {' and '.join(hooks)} (a model module's optional functions) but no "
            f"{MODEL_FUNCTION}, so {runs_as}; if it is one, define {MODEL_FUNCTION}(hp) in it"
        )
    return ""


def _python_program(name: str, script: Path, code_dir: Path) -> Program:
    shape = module_shape(script.read_text(encoding="utf-8", errors="replace"))
    if shape.is_model_module:
        why = f"it defines {MODEL_FUNCTION} at its top level: the managed trainer runs it on every rank"
        return Program(ProgramKind.KERAS_MODEL_MODULE, name, script, code_dir, why)
    if shape.syntax_error:
        why = (
            f"it does not parse as Python ({shape.syntax_error}): it runs as a script, and Python says where"
        )
    else:
        why = f"it defines no top-level {MODEL_FUNCTION}: it runs as a script"
    return Program(ProgramKind.PYTHON_SCRIPT, name, script, code_dir, why, near_miss(name, shape))


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
        return _python_program(name, script, code_dir)
    if path.is_file():
        if name.endswith(".sh"):
            return Program(ProgramKind.SHELL_SCRIPT, name, path, code_dir, "a shell script: bash runs it")
        return Program(
            ProgramKind.EXECUTABLE, name, path, code_dir, "not a .py or .sh file: it runs as a program"
        )
    if _is_package(code_dir) and name.replace(".", "").replace("_", "").isalnum():
        why = (
            f"{code_dir} holds a Python package (setup.py or pyproject.toml): installed, then run as a module"
        )
        return Program(ProgramKind.PYTHON_PACKAGE, name, None, code_dir, why)
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
    if program.kind is ProgramKind.PYTHON_PACKAGE or program.path is None:
        return [python, "-m", program.name, *args]
    if os.access(program.path, os.X_OK):
        return [str(program.path), *args]
    return ["/bin/sh", str(program.path), *args]
