"""Reading the JSON configuration files with errors that name the file, the field and what is wrong."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagetrain.config.limits import MAX_CONFIG_FILE_BYTES
from sagetrain.errors import UserError


def read_json_object(path: Path, *, required: bool = True, too_large_hint: str = "") -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when the file is optional and absent. A file larger than any
    SageMaker writes is refused before it is read (``too_large_hint`` says what SageMaker's limits on it
    are and what to do instead). Every text in it is checked to be one the environment and the file
    system can carry (no NUL, no lone surrogate)."""
    try:
        text = _read_bounded(path, too_large_hint).decode("utf-8")
    except FileNotFoundError:
        if not required:
            return {}
        raise UserError(
            f"{path} is missing; SageMaker writes it at job start, so check the mounted /opt/ml tree"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path} cannot be read: {error}") from None
    value = _parsed(text, path)
    if not isinstance(value, dict):
        raise UserError(f"{path} must hold a JSON object, found {type(value).__name__}")
    check_texts(value, path)
    return value


def _parsed(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); fix the file"
        ) from None
    except RecursionError:
        raise UserError(f"{path} nests JSON arrays or objects too deeply to read; flatten it") from None
    except ValueError:  # the one other error json raises: an integer past Python's digit limit
        raise _long_number_error(text, path) from None


@dataclass(frozen=True)
class _LongInteger:
    """Where an integer stood that has more digits than Python converts (sys.get_int_max_str_digits)."""

    digits: int


def _integer(text: str) -> int | _LongInteger:
    try:
        return int(text)
    except ValueError:
        return _LongInteger(len(text.lstrip("-")))


def long_integer_field(document: Any) -> tuple[str, int] | None:
    """(the field, its digits) of the first integer too long for Python in a document read with
    ``parse_int=_integer``; None when it holds none. Iterative, as deep as JSON nests."""
    pending: list[tuple[str, Any]] = [("", document)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, _LongInteger):
            return where, value.digits
        if isinstance(value, dict):
            pending.extend((f"{where}.{key}" if where else str(key), item) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((f"{where}[{index}]", item) for index, item in enumerate(value))
    return None


def _long_number_error(text: str, path: Path) -> UserError:
    found = long_integer_field(json.loads(text, parse_int=_integer))
    where = f"{path} field {found[0]!r}" if found and found[0] else str(path)
    digits = f" {found[1]:,} digits long" if found else ""
    return UserError(
        f"{where} holds a number{digits}, more than the {sys.get_int_max_str_digits():,} digits Python "
        "reads; no file SageMaker writes holds one: give the value as a string, or a shorter number"
    )


def quoted(value: object, limit: int = 80) -> str:
    """``repr(value)`` as a message quotes it: whole when short, else its start and its size, so that a
    huge input never makes a huge message."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        size = f"{len(value):,} characters"
    elif isinstance(value, list | dict):
        size = f"{len(value):,} items"
    else:
        size = f"{len(text):,} characters written out"
    return f"{text[:limit]}… ({size})"


def _read_bounded(path: Path, too_large_hint: str) -> bytes:
    """The file's bytes, or a UserError when it holds more than MAX_CONFIG_FILE_BYTES. The size is
    checked before reading and the read stops one byte past the limit, so neither a huge file nor one
    whose size stat cannot tell (a pipe, /dev/zero) is ever held in memory."""
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        data = b"" if size > MAX_CONFIG_FILE_BYTES else file.read(MAX_CONFIG_FILE_BYTES + 1)
    if size > MAX_CONFIG_FILE_BYTES or len(data) > MAX_CONFIG_FILE_BYTES:
        held = f"is {size:,} bytes, more" if size > MAX_CONFIG_FILE_BYTES else "is larger"
        raise UserError(
            f"{path} {held} than the {MAX_CONFIG_FILE_BYTES:,} bytes "
            f"({MAX_CONFIG_FILE_BYTES >> 20} MiB) this image reads from a configuration file"
            + (too_large_hint or "; SageMaker writes none that large, so check what wrote the file")
        )
    return data


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "holds a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "holds text that is not valid Unicode (a lone surrogate such as \\ud800)"
    return None


def check_texts(document: dict[str, Any], path: Path) -> None:
    """Refuse the first key or string value that no environment variable, argument or file name can
    hold, naming where it is. Iterative: the document may be nested as deep as JSON allows."""
    pending: list[tuple[str, Any]] = [(key, value) for key, value in document.items()]
    while pending:
        where, value = pending.pop()
        problem = _text_problem(where)
        if problem is None and isinstance(value, str):
            problem = _text_problem(value)
        if problem is not None:
            raise UserError(f"{path} field {where!r} {problem}; remove it or write plain UTF-8 text")
        if isinstance(value, dict):
            pending.extend((f"{where}.{key}", item) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((f"{where}[{index}]", item) for index, item in enumerate(value))
