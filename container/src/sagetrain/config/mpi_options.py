"""mpirun options as ``sagemaker_mpi_custom_mpi_options`` (or the SageMaker SDK's MPI driver) gives them:
which option each one is, and its value. Pure.

An option's identity ignores how it is spelled (``-n``/``-np``, ``--host``/``-H``, ``-mca``/``--mca``)
and, for ``-mca`` and ``-x``, includes the parameter or variable it sets: two options with one identity
set the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence

_FLAG_ALIASES = {
    "n": "np",
    "c": "np",
    "host": "H",
    "machinefile": "hostfile",
    "default-hostfile": "hostfile",
    "N": "npernode",
}
_FLAGS_WITH_VALUE = frozenset({"np", "H", "hostfile", "bind-to", "map-by", "rank-by", "npernode", "x", "mca"})
# Options that place the ranks on the hosts another way than the plan's (-map-by slot): where a rank runs
# is then not known before it starts.
PLACEMENT_OPTIONS = frozenset({("flag", "map-by"), ("flag", "rank-by")})
# How many ranks run and on which hosts: the plan decides (the launcher waits for, and names, the ranks it
# planned on the hosts whose sshd it set up), so the custom options may not.
PLAN_OWNED = frozenset({("flag", "np"), ("flag", "H"), ("flag", "hostfile"), ("flag", "npernode")})
# Options with which a command says itself how many ranks go on which host (Open MPI 4.1's mapper: its
# flags, and the MCA parameters of its rmaps framework, rmaps_base_*).
_RANK_PLACING_FLAGS = frozenset(
    {"map-by", "npernode", "hostfile", "rankfile", "rf", "ppr", "pernode", "npersocket", "bynode"}
)
RANK_PLACING_MCA_PREFIX = "rmaps_base_"


def places_ranks(key: tuple[str, str]) -> bool:
    """Whether the option ``key`` names decides how many ranks go on which host."""
    kind, name = key
    if kind == "mca":
        return name.startswith(RANK_PLACING_MCA_PREFIX)
    return kind == "flag" and name in _RANK_PLACING_FLAGS


def option_key(tokens: Sequence[str], index: int) -> tuple[tuple[str, str], int]:
    """The identity of the option starting at ``tokens[index]`` and how many tokens it spans."""
    name, equals, _ = tokens[index].lstrip("-").partition("=")
    name = _FLAG_ALIASES.get(name, name)
    if equals:
        return ("flag", name), 1
    if name == "mca" and index + 1 < len(tokens):
        return ("mca", tokens[index + 1]), 3
    if name == "x" and index + 1 < len(tokens):
        return ("x", tokens[index + 1].split("=", 1)[0]), 2
    if name in _FLAGS_WITH_VALUE:
        return ("flag", name), 2
    return ("flag", name), 1


def option_value(tokens: Sequence[str], index: int) -> str:
    """The value of the option starting at ``tokens[index]`` (``--name value`` or ``--name=value``; an
    MCA parameter's is the token after its name); empty when it has none."""
    _, equals, value = tokens[index].partition("=")
    if equals:
        return value
    span = option_key(tokens, index)[1]
    return tokens[index + span - 1] if span > 1 and index + span - 1 < len(tokens) else ""


def options(tokens: Sequence[str]) -> list[tuple[tuple[str, str], str]]:
    """Every option in ``tokens``: its identity and its flag as written."""
    found = []
    index = 0
    while index < len(tokens):
        if tokens[index].startswith("-"):
            key, span = option_key(tokens, index)
            found.append((key, tokens[index]))
            index += span
        else:
            index += 1
    return found


def option_keys(tokens: Sequence[str]) -> set[tuple[str, str]]:
    return {key for key, _ in options(tokens)}
