"""The benchmarks import only what sagetrain/benchmark_surface.py declares, and what it declares exists."""

import ast
import importlib
from pathlib import Path

from sagetrain.benchmark_surface import BENCHMARK_SURFACE

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TENSORFLOW_FREE = ("sagetrain.deadline", "sagetrain.config.", "sagetrain.report.", "sagetrain.launch.")


def sagetrain_imports() -> dict[tuple[str, str], list[str]]:
    """(module, name) → the benchmark files importing it; ``name`` "*" for a plain ``import``."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(BENCHMARKS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            pairs = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sagetrain"):
                pairs = [(str(node.module), alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                pairs = [(alias.name, "*") for alias in node.names if alias.name.startswith("sagetrain")]
            for pair in pairs:
                found.setdefault(pair, []).append(str(path.relative_to(BENCHMARKS)))
    return found


def test_the_benchmarks_import_only_the_declared_surface():
    imports = sagetrain_imports()
    assert imports, "the benchmarks import nothing of sagetrain: the check would be empty"
    undeclared = {
        pair: files for pair, files in imports.items() if pair[1] not in BENCHMARK_SURFACE.get(pair[0], ())
    }
    assert undeclared == {}


def test_every_declared_name_exists():
    for module, names in BENCHMARK_SURFACE.items():
        if not module.startswith(TENSORFLOW_FREE):
            continue  # the trainer's modules import TensorFlow, which this machine's tests need not have
        loaded = importlib.import_module(module)
        assert [name for name in sorted(names) if not hasattr(loaded, name)] == [], module
