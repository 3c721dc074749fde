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
    {"stage"},  # what every stage script shares: arguments, params section, training data, exit
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
        "outputs",
        "catalog",
        "names",
        "cpu",
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


# --------------------------------------------------------------- inside a folder

MAX_LINES = 500  # one concept per module: past this, a module holds more than one (issue 40)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_targets(tree: ast.AST, modules: set[str]) -> Iterator[str]:
    """Like :func:`imported_modules`, but ``from compat.x import y`` names the module
    ``compat.x.y`` when ``y`` is one (importing a sibling through its package is an edge to the
    sibling, not to the package's ``__init__``)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for node in child.orelse:
                yield from imported_targets(ast.Module(body=[node], type_ignores=[]), modules)
            continue
        if isinstance(child, ast.Import):
            yield from (a.name for a in child.names if a.name.split(".")[0] == "compat")
        elif (
            isinstance(child, ast.ImportFrom)
            and child.level == 0
            and (child.module or "").split(".")[0] == "compat"
        ):
            base = str(child.module)
            for alias in child.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in modules else base
        yield from imported_targets(child, modules)


def module_edges() -> dict[tuple[str, str], str]:
    """(module, module) -> the importing module, for imports between modules of one folder."""
    modules = _modules()
    names = set(modules)
    edges: dict[tuple[str, str], str] = {}
    for name, path in modules.items():
        folder = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for target in imported_targets(tree, names):
            while target not in names and "." in target:
                target = target.rsplit(".", 1)[0]
            target_folder = (
                target if modules[target].name == "__init__.py" else target.rsplit(".", 1)[0]
            )
            if target != name and target_folder == folder:
                edges[(name, target)] = name
    return edges


def test_imports_name_the_sibling_module():
    tree = ast.parse("from compat.maps import card, open_map\n")
    got = list(imported_targets(tree, {"compat.maps", "compat.maps.card"}))
    assert got == ["compat.maps.card", "compat.maps"]


def test_no_import_cycle_inside_a_folder():
    """A package's ``__init__`` may re-export its modules, so a module that imports its own
    package (``from compat.maps import open_map``) closes a circle; modules import the sibling
    that defines a name instead, and lazy imports count."""
    cycle = find_cycle(set(module_edges()))
    assert cycle is None, "import cycle inside a folder: " + " -> ".join(cycle or [])


def test_no_module_over_the_line_limit():
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split by concept): {long}"


def _packages() -> dict[str, list[str]]:
    """package -> its modules' short names (``__init__`` excluded)."""
    out: dict[str, list[str]] = {}
    for name, path in _modules().items():
        if path.name != "__init__.py" and "." in name.removeprefix("compat."):
            out.setdefault(name.rsplit(".", 1)[0], []).append(name.rsplit(".", 1)[1])
    return out


def test_every_module_is_named_in_its_package_index():
    """Each package's docstring is its index: it names every module (``compat.pkg.module``)."""
    missing = []
    for package, mods in sorted(_packages().items()):
        init = PACKAGE.parent / package.replace(".", "/") / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        missing += [f"{package}.{m}" for m in mods if f"{package}.{m}" not in doc]
    assert not missing, "modules missing from their package's docstring: " + ", ".join(missing)


def test_every_module_is_named_in_the_design():
    """docs/design.md's floors table (and its maps table) names every module of a folder."""
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    rows = {}
    for line in design.splitlines():
        if line.startswith("| `") and "/` |" in line.split("|")[1] + "|":
            rows[line.split("`")[1].rstrip("/")] = line
    maps_section = design.split("## Maps between spaces", 1)[1].split("\n## ", 1)[0]
    missing = []
    for package, mods in sorted(_packages().items()):
        short = package.removeprefix("compat.")
        text = rows.get(short, "") + (maps_section if short == "maps" else "")
        missing += [f"{package}.{m}" for m in mods if f"`{m}`" not in text]
    assert not missing, "modules docs/design.md#floors does not name: " + ", ".join(missing)
