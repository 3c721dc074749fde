"""Every DVC stage depends on the compat code its script runs.

DVC re-runs a stage only when one of its ``deps`` changes. A stage whose script imports a compat
module that no dep covers keeps stale outputs after that module changes, and nobody notices. So
for every stage of every dvc.yaml (the root pipeline and each experiment's; ``foreach`` stages
expanded per item), this test follows the script's imports through compat (with ``ast``: imports
inside functions count, ``if TYPE_CHECKING:`` blocks do not) and asserts that each module's file
lies under one of the stage's dep paths (a file, or a folder that contains it).

The imports are read from whatever the tree holds when the test runs, so a module moved or added
by anyone is checked against the deps as they are: nothing here names the modules a stage uses.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPAT = REPO / "compat"

# Configuration-only modules: a change in one of them cannot change what a stage writes, so no
# stage needs to list them (listing them would re-run every stage for an edited error message).
ALLOWLIST = {
    # Sets environment defaults before any heavy import: MLflow's telemetry off (no output
    # depends on it) and compat.cpu' OpenMP defaults, a module checked here like any other.
    "compat/__init__.py",
    # Exception classes and their exit codes: they decide how a stage fails, never what it writes.
    "compat/errors.py",
    # Reads a YAML file and formats validation errors. The values a stage uses are the params
    # sections DVC already tracks, validated by the section's model (a module the stage imports,
    # checked here); this file only parses and words the errors.
    "compat/config.py",
    # Which section of the params file a stage reads (read_section) and the whole-file model for
    # tests; the validation itself is the section's model, again a checked module.
    "compat/params.py",
    # Name -> factory lookup (timm-style catalogs); what a name builds is defined in the module
    # that registers it (losses, backbones, heads), each a checked dependency.
    "compat/catalog.py",
    # Checks names that become paths (versions, training sets) against one rule and that an
    # output path stays inside the project; it refuses bad input, it never shapes an output.
    "compat/names.py",
    # Opens a file only if it is a regular file (a FIFO would block a read forever); it refuses
    # bad input, it never shapes an output.
    "compat/files.py",
}
# Not allowlisted on purpose: compat/io.py writes the JSON outputs (indentation, key order) and
# computes the fingerprints stored in them, so a change there does change outputs.


def _pipelines() -> list[Path]:
    """Every dvc.yaml of the repository: the root's and each experiment's."""
    return [REPO / "dvc.yaml", *sorted(REPO.glob("experiments/*/dvc.yaml"))]


_VAR = re.compile(r"\$\{\s*(key|item)(?:\.([\w-]+))?\s*\}")


def _substitute(value: Any, key: Any, item: Any) -> Any:
    """A foreach template with ``${key}``, ``${item}`` and ``${item.field}`` filled in."""
    if isinstance(value, str):

        def one(m: re.Match[str]) -> str:
            if m.group(1) == "key":
                return str(key)
            return str(item[m.group(2)] if m.group(2) else item)

        return _VAR.sub(one, value)
    if isinstance(value, list):
        return [_substitute(v, key, item) for v in value]
    if isinstance(value, dict):
        return {_substitute(k, key, item): _substitute(v, key, item) for k, v in value.items()}
    return value


def _stages(dvc_yaml: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, stage) for every stage, ``foreach`` stages expanded per item (``name@key``)."""
    stages = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))["stages"]
    for name, stage in stages.items():
        if "foreach" not in stage:
            yield name, stage
            continue
        items = stage["foreach"]
        if isinstance(items, str):  # ${section}: the params file's section of that name
            params = yaml.safe_load((dvc_yaml.parent / "params.yaml").read_text(encoding="utf-8"))
            for part in items.strip("${} ").split("."):
                params = params[part]
            items = params
        pairs = items.items() if isinstance(items, dict) else ((i, i) for i in items)
        for key, item in pairs:
            yield f"{name}@{key}", _substitute(stage["do"], key, item)


def _script(stage: dict[str, Any], folder: Path) -> Path | None:
    """The Python script the stage's command runs, if it runs one of this repository's."""
    for word in shlex.split(stage["cmd"]):
        if word.endswith(".py"):
            path = (folder / stage.get("wdir", ".") / word).resolve()
            return path if path.is_relative_to(REPO) else None
    return None


def _module_file(name: str) -> Path | None:
    """compat.a.b -> compat/a/b.py or compat/a/b/__init__.py (None: not a module, e.g. a name)."""
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@cache
def _imported_names(path: Path) -> frozenset[str]:
    """Every module name ``path`` imports anywhere (functions included; not for type checkers),
    with ``from pkg import name`` also giving ``pkg.name`` (it may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module_name = _module_name(path) if path.is_relative_to(COMPAT) else ""
    package = module_name if path.name == "__init__.py" else module_name.rpartition(".")[0]
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:  # the else branch runs
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return frozenset(n for n in names if n == "compat" or n.startswith("compat."))


def _with_packages(name: str) -> list[str]:
    """Importing compat.a.b runs compat/__init__.py and compat/a/__init__.py first."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _allowlisted(path: Path) -> bool:
    return str(path.relative_to(REPO)) in ALLOWLIST


def compat_closure(script: Path) -> set[Path]:
    """The files of every compat module ``script`` imports, directly or through compat.

    Of an allowlisted module only the module-level imports are followed (what any importer
    runs): compat/params.py imports every section's model inside ``load_params`` (the whole-file
    check no stage runs), and following that would make every stage "depend" on every config
    model; compat/__init__.py imports compat.cpu at module level, so every stage runs it.
    """
    seen: set[Path] = set()
    todo = [script]
    while todo:
        current = todo.pop()
        names = (
            _module_level_compat_imports(current)
            if current != script and _allowlisted(current)
            else _imported_names(current)
        )
        for name in names:
            for module in _with_packages(name):
                path = _module_file(module)
                if path is not None and path not in seen:
                    seen.add(path)
                    todo.append(path)
    return seen


def _docstring_only(path: Path) -> bool:
    """A package marker with nothing but a docstring runs no code: nothing to depend on. Once
    code is added to it, it is checked like any module."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    code = [
        n
        for n in body
        if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
        and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
    ]
    return not code


def _cases() -> list[Any]:
    cases = []
    for dvc_yaml in _pipelines():
        folder = dvc_yaml.parent
        for name, stage in _stages(dvc_yaml):
            script = _script(stage, folder)
            if script is not None:
                label = f"{dvc_yaml.relative_to(REPO)}:{name}"
                cases.append(pytest.param(folder, stage, script, id=label))
    return cases


@pytest.mark.parametrize(("folder", "stage", "script"), _cases())
def test_stage_deps_cover_the_compat_code_it_runs(folder: Path, stage: dict, script: Path):
    wdir = (folder / stage.get("wdir", ".")).resolve()
    deps = [(wdir / d).resolve() for d in stage.get("deps", [])]
    assert script in deps, f"{script.relative_to(REPO)} is not a dep of its own stage"

    def covered(path: Path) -> bool:
        return any(path == d or path.is_relative_to(d) for d in deps)

    missing = sorted(
        str(path.relative_to(REPO))
        for path in compat_closure(script)
        if not _allowlisted(path)
        and not (path.name == "__init__.py" and _docstring_only(path))
        and not covered(path)
    )
    assert not missing, f"imported but not in deps: {missing}"


def test_the_closure_follows_lazy_imports_and_skips_type_checking(tmp_path: Path):
    """The import walk itself, on the evaluate stage: runner imports lazily inside functions."""
    closure = {str(p.relative_to(REPO)) for p in compat_closure(REPO / "stages" / "evaluate.py")}
    assert "compat/evaluate/config.py" in closure and "compat/__init__.py" in closure
    script = tmp_path / "s.py"
    script.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import compat.registry.store\n"
        "def f():\n    from compat.io import write_json\n"
    )
    names = {str(p.relative_to(REPO)) for p in compat_closure(script)}
    assert "compat/io.py" in names
    assert not any(n.startswith("compat/registry") for n in names)


def _module_level_compat_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return {n for n in names if n == "compat" or n.startswith("compat.")}


def test_module_level_imports_of_an_allowlisted_module_are_followed():
    """compat/__init__.py is allowlisted, but what it imports at module level runs in every
    stage: the closure of any stage script holds it."""
    closure = compat_closure(REPO / "stages" / "data.py")
    assert COMPAT / "cpu.py" in closure
    assert COMPAT / "__init__.py" in closure
