"""compat's floors (docs/design.md#floors): subpackages import only floors below them, and no
import cycle joins two subpackages. Lazy imports inside functions count (they run sooner or
later); imports under ``if TYPE_CHECKING:`` do not (they never run)."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "compat"

# Top down. A module may import from a lower floor; ground modules may import each other
# (the cycle check still applies to them).
FLOORS: list[set[str]] = [
    {"cli", "params"},  # params.py validates params.yaml as a whole: every stage's section
    {"registry"},
    {"contracts"},
    {"backfill"},
    {
        "maps"
    },  # fitted maps between spaces: above evaluate/compare (their check), train (psi's loop)
    {"evaluate"},
    {"compare"},
    {"train"},
    {"losses"},
    {"functional"},
    {"embeddings"},
    {"models"},
    {"data"},
    {
        "compat",
        "config",
        "errors",
        "io",
        "files",
        "catalog",
        "names",
    },  # the ground floor ("compat": __init__.py)
]
GROUND = FLOORS[-1]


def _floor(unit: str) -> int:
    for level, units in enumerate(FLOORS):
        if unit in units:
            return level
    raise AssertionError(
        f"compat.{unit} sits on no floor: add it to FLOORS here and to docs/design.md"
    )


def _unit(module: str) -> str:
    """``compat.evaluate.report`` -> ``evaluate``; ``compat.io`` -> ``io``; ``compat`` -> ``compat``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_modules(tree: ast.AST) -> Iterator[str]:
    """Every ``compat`` module a syntax tree imports, at any depth, except under TYPE_CHECKING."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for node in child.orelse:
                yield from imported_modules(ast.Module(body=[node], type_ignores=[]))
            continue
        if isinstance(child, ast.Import):
            yield from (a.name for a in child.names if a.name.split(".")[0] == "compat")
        elif (
            isinstance(child, ast.ImportFrom)
            and child.level == 0
            and (child.module or "").split(".")[0] == "compat"
        ):
            yield str(child.module)
        yield from imported_modules(child)


def package_edges(package: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> the module-level imports that make the edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        for target in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            a, b = _unit(module), _unit(target)
            if a != b:
                edges.setdefault((a, b), []).append(f"{module} imports {target}")
    return edges


def find_cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    """One cycle of the directed graph as a closed path [a, b, ..., a], or None."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_and_clears():
    assert find_cycle({("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c", "a"]
    assert find_cycle({("a", "b"), ("b", "c"), ("a", "c")}) is None


def test_imports_are_collected_lazily_but_not_for_type_checking():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import compat.io\n"
        "if TYPE_CHECKING:\n    from compat.registry import store\n"
        "else:\n    import compat.errors\n"
        "def f():\n    from compat.evaluate.report import write_report\n"
    )
    assert sorted(imported_modules(tree)) == [
        "compat.errors",
        "compat.evaluate.report",
        "compat.io",
    ]


def test_no_import_cycle_between_subpackages():
    edges = package_edges()
    cycle = find_cycle(set(edges))
    if cycle:
        why = [edges[(a, b)][0] for a, b in itertools.pairwise(cycle)]
        pytest.fail("import cycle " + " -> ".join(cycle) + ": " + "; ".join(why))


def test_every_import_goes_down_a_floor():
    wrong = []
    for (a, b), where in sorted(package_edges().items()):
        if a in GROUND and b in GROUND:
            continue
        if _floor(b) <= _floor(a):
            wrong.append(f"{a} -> {b} ({where[0]})")
    assert not wrong, "imports against the floors (docs/design.md#floors):\n" + "\n".join(wrong)
