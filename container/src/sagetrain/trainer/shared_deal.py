"""A channel's deal as one rank of a host passes it to the others (trainer/host_once.py): its text, and
that text read back, checked to be this folder's deal between this many members. No TensorFlow."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TypeGuard

from sagetrain.trainer.sharding import DataFile, Deal

_FOLDER, _FORMAT, _MEMBERS = "folder", "format", "members"
_PATHS, _SIZES, _OWNERS = "paths", "sizes", "owners"


def deal_name(folder: Path, members: int) -> str:
    """The name the deal of ``folder`` between ``members`` members is shared under (a channel's name may
    hold dots, which a file name of its own would resolve)."""
    return "deal-" + hashlib.sha256(os.fsencode(folder) + f"\0{members}".encode()).hexdigest()[:24]


def deal_text(folder: Path, data_format: str, deal: Deal) -> str:
    """``deal`` of ``folder``'s files in ``data_format``, as JSON (ASCII: a file name that is not UTF-8
    stays escaped)."""
    # One transposition rather than a field lookup per file and field: the other ranks wait for this.
    paths, sizes = zip(*deal.files, strict=True) if deal.files else ((), ())
    return json.dumps(
        {
            _FOLDER: str(folder),
            _FORMAT: data_format,
            _MEMBERS: deal.members,
            _PATHS: paths,
            _SIZES: sizes,
            _OWNERS: deal.owners,
        }
    )


def _whole_numbers(values: object) -> TypeGuard[list[int]]:
    return isinstance(values, list) and all(type(value) is int for value in values)


def _listed_in(paths: object, folder: Path) -> TypeGuard[list[str]]:
    """Whether ``paths`` are what a listing of ``folder`` gives: some, all beneath it, none stepping back
    up (a listing skips every name that starts with a dot)."""
    inside = f"{folder}{os.sep}"
    return (
        isinstance(paths, list)
        and bool(paths)
        and all(
            isinstance(path, str) and path.startswith(inside) and path.find(f"{os.sep}.", len(inside) - 1) < 0
            for path in paths
        )
    )


def deal_from(text: str, folder: Path, members: int) -> tuple[str, Deal]:
    """The format and the deal ``deal_text`` wrote for ``folder`` and ``members``; ValueError for any
    other text."""
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError("not a deal")
    paths, sizes, owners = document.get(_PATHS), document.get(_SIZES), document.get(_OWNERS)
    if (
        document.get(_FOLDER) != str(folder)
        or document.get(_MEMBERS) != members
        or not isinstance(document.get(_FORMAT), str)
        or not _listed_in(paths, folder)
        or not _whole_numbers(sizes)
        or not _whole_numbers(owners)
        or len(sizes) != len(paths)
    ):
        raise ValueError(f"not the deal of {folder} between {members} members")
    return document[_FORMAT], Deal(tuple(map(DataFile, paths, sizes)), members, tuple(owners))
