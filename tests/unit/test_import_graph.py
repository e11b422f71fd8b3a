"""The package's import graph, read from the source (every `import`, at the top of a module or inside a
function): it has no circle, and the SageMaker SDK support (`sagetrain.sdk`) is its top floor, which
nothing else imports."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "sagetrain"
SRC = Path(__file__).resolve().parents[2] / "container" / "src"


def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name ``module`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """{module: the package modules importing it runs}: the module named, and each package on the way to
    it that is not one of the importer's own packages (Python has those loaded already)."""
    modules = module_files()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        parts = module.split(".")
        own = {".".join(parts[:end]) for end in range(1, len(parts) + 1)}
        graph[module] = set()
        for name in imported_names(module, path):
            pieces = name.split(".")
            loaded = {".".join(pieces[:end]) for end in range(1, len(pieces) + 1)}
            graph[module] |= {m for m in loaded if m in modules and m not in own}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` leads to through one import or more."""
    seen: set[str] = set()
    pending = list(graph[start])
    while pending:
        module = pending.pop()
        if module not in seen:
            seen.add(module)
            pending.extend(graph.get(module, ()))
    return seen


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, each sorted: two modules are in one group when
    each leads to the other."""
    leads_to = {module: reachable(graph, module) for module in graph}
    groups = {
        tuple(sorted(other for other in leads_to[module] if module in leads_to[other]))
        for module in graph
        if module in leads_to[module]
    }
    return sorted(list(group) for group in groups)


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []


def test_a_circle_is_found_where_there_is_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


# The package's floors, lowest first (docs/architecture.md): a module imports its own floor or lower ones.
FLOORS = (
    {
        "errors",
        "atomic_file",
        "deadline",
        "engines",
        "redact",
        "legacy_keras",
        "contracts",
        "mapping_compat",
        "benchmark_surface",
    },
    {"config"},
    {"plan", "program", "report", "trainer"},
    {"launch"},
    {"preparation"},
    {"entry", "__main__"},
    {"sdk"},
)


def floor(module: str) -> int:
    name = module.split(".")[1] if "." in module else module
    return next(index for index, members in enumerate(FLOORS) if name in members)


def test_every_module_is_on_a_floor():
    unplaced = {module.split(".")[1] for module in module_files() if "." in module}
    assert unplaced <= set().union(*FLOORS)


def test_no_module_imports_a_higher_floor():
    upward = sorted(
        (module, target)
        for module, imported in import_graph().items()
        for target in imported
        if "." in module and floor(target) > floor(module)
    )
    assert upward == []


def test_the_sdk_support_is_imported_by_nothing_below_it():
    importers = {
        module
        for module, imported in import_graph().items()
        if not module.startswith(f"{PACKAGE}.sdk")
        and any(name.startswith(f"{PACKAGE}.sdk") for name in imported)
    }
    assert importers == set()


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    # sdk.v3 imports sdk.ssh only inside the function that runs in the SDK's MPI driver.
    assert "sagetrain.sdk.ssh" in graph["sagetrain.sdk.v3"]
