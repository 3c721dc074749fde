"""The reference pages (docs/cli.md, docs/params.md, docs/contracts.md) are what
scripts/docs_reference.py generates from the code: a command, an option or a params key added,
removed or reworded without regenerating them fails here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_reference"] = module
    spec.loader.exec_module(module)
    return module


def test_the_reference_pages_agree_with_the_code():
    assert _script().main(["--check"]) == 0


def test_every_command_and_params_section_is_on_its_page():
    ref = _script()
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for command in ("register", "promote", "versions", "score", "backfill", "adapt", "embed"):
        assert f"## `compat {command}`" in cli, command
    params = (ROOT / "docs" / "params.md").read_text(encoding="utf-8")
    for section in ("TrainConfig", "UpgradeConfig", "EvaluateConfig", "SplitParams"):
        assert f"### {section}" in params, section
    assert "| `val_fraction` |" in params
    assert "### Contract" in (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    assert set(ref.GENERATORS) == {"cli", "params", "contract"}


def test_a_stale_reference_is_caught():
    ref = _script()
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    stale = text.replace("## `compat promote`", "## `compat promote-now`", 1)
    _, changed = ref.render(stale)
    assert changed == ["cli"]


def test_the_exit_code_table_lists_every_code_compat_exits_with():
    """docs/exit-codes.md has one row per code, 0 to 7: the codes of compat/errors.py's error
    classes, 1 (a failed criterion) and NOTHING_DONE."""
    import re

    from compat import errors

    text = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    rows = [int(m) for m in re.findall(r"^\| (\d) \|", text, re.M)]
    classes = {c.exit_code for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.CompatError)}  # fmt: skip
    assert rows == sorted(set(rows)) == sorted(classes | {0, 1, errors.NOTHING_DONE})
