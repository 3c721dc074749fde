"""One command-line style for every stage script (stages/*.py).

Each builds an argparse parser from its docstring (a per-version stage through
:func:`compat.stage.version_parser`), takes ``--params`` (and ``--no-progress`` where it shows
progress), runs its work through :func:`compat.stage.run_stage`, which turns a CompatError into
``error: <message>`` on stderr and the documented exit code, and runs
``sys.exit(main(sys.argv[1:]))`` as a script; ``main()`` without
arguments (an in-process caller) means the defaults, never the caller's own ``sys.argv``.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "stages").glob("*.py"))
# The stages with a progress bar (training loops) or progress lines (adapt embeds its pairs);
# the others print one line per result.
PROGRESS = {"train", "upgrade", "adapt"}
# The positional argument of stages that run once per version (foreach / one stage per version).
POSITIONAL = {"train": ["v1"], "upgrade": ["v2"]}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"stage_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _options(tree: ast.Module) -> set[str]:
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_argument"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_stage_script_follows_the_cli_style(path: Path):
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    per_version = path.stem in POSITIONAL
    if per_version:
        assert "version_parser(__doc__)" in text
    else:
        assert "argparse.ArgumentParser(description=__doc__.splitlines()[0])" in text
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    assert ast.unparse(main.args) == "argv: list[str] | None=None"
    assert "parser.parse_args([] if argv is None else argv)" in text
    options = _options(tree)
    if per_version:
        options |= _options(ast.parse((REPO / "compat" / "stage.py").read_text(encoding="utf-8")))
    assert "--params" in options
    assert ("--no-progress" in options) == (path.stem in PROGRESS)
    assert "return run_stage(body)" in text
    last = tree.body[-1]
    assert isinstance(last, ast.If) and ast.unparse(last) == (
        "if __name__ == '__main__':\n    sys.exit(main(sys.argv[1:]))"
    )


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_a_missing_params_file_is_exit_3_with_one_error_line(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stage = _load(path)
    argv = [*POSITIONAL.get(path.stem, []), "--params", "nope.yaml"]
    assert stage.main(argv) == 3
    assert capsys.readouterr().err.splitlines() == ["error: nope.yaml: file not found"]


def test_run_stage_turns_an_error_into_one_line_and_its_code(capsys):
    from compat.errors import NotFoundError
    from compat.stage import run_stage

    def fails() -> int:
        raise NotFoundError("models/v9: not found")

    assert run_stage(fails) == 3
    assert capsys.readouterr().err == "error: models/v9: not found\n"
    assert run_stage(lambda: None) == 0 and run_stage(lambda: 7) == 7
