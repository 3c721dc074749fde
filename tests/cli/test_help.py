"""Every command's ``--help`` reads right: it lists the exit codes, describes every option and
argument, shows boolean flags as flags (``--json``, not ``--json <bool>``), and cuts nothing
short (no ``…``), on a wide terminal and on an 80-column one.

The walk covers the whole command tree (typer.main.get_command), so a command added later is
checked without touching this file.
"""

from __future__ import annotations

import re

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from compat.cli.main import app

runner = CliRunner()
WIDTHS = (200, 80)


def _walk(command, path=()):
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            yield from _walk(sub, (*path, name))


COMMANDS = list(_walk(typer.main.get_command(app)))


def _ctx(path):
    """A context for the command at ``path`` (its parents' contexts above it)."""
    command = typer.main.get_command(app)
    ctx = command.make_context("compat", [], resilient_parsing=True)
    for name in path:
        command = command.commands[name]
        ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
    return ctx


def _params(path):
    ctx = _ctx(path)
    return ctx, [p for p in ctx.command.get_params(ctx) if not getattr(p, "hidden", False)]


def _is_flag(param) -> bool:
    return bool(getattr(param, "is_flag", False)) and not getattr(param, "count", False)


@pytest.fixture(autouse=True)
def _no_fixed_width(monkeypatch):
    """COLUMNS decides the width (a TERMINAL_WIDTH in the environment would override it)."""
    from typer import rich_utils

    monkeypatch.setattr(rich_utils, "MAX_WIDTH", None)
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)


def _help(path, width: int) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_walk_finds_every_command():
    names = {" ".join(p) for p, _ in COMMANDS}
    expected = {"register", "promote", "versions", "show", "chain", "log", "verify", "score"}
    assert expected | {"backfill", "data info", "data preview", "contract validate"} <= names


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "compat")
def test_help_reads_right(path, width):
    text = _help(path, width)
    where = f"compat {' '.join(path)} --help (COLUMNS={width})"
    flat = " ".join(text.split())

    # the exit codes: one paragraph, starting with 0, every code one of README's table (0-7)
    section = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if "Exit codes:" in p]
    assert len(section) == 1, f"{where}: no 'Exit codes:' paragraph:\n{text}"
    codes = [int(c) for c in re.findall(r"(?:Exit codes:|;) (\d)\b", section[0])]
    assert codes and codes[0] == 0, f"{where}: exit codes do not start with 0: {section[0]}"
    assert codes == sorted(set(codes)) and set(codes) <= set(range(8)), f"{where}: {codes}"

    # nothing cut short (rich ends a cell it cannot fit with an ellipsis)
    assert "…" not in text, f"{where}: truncated:\n{text}"

    ctx, params = _params(path)
    for param in params:
        name = param.opts[0] if param.opts else param.name
        # every option and argument is described
        assert (getattr(param, "help", None) or "").strip(), f"{where}: {name} has no help"
        # and a boolean flag is shown as a flag: no value placeholder after it
        if _is_flag(param):
            assert not param.display_type_rich(ctx), f"{where}: {name} shows a value"
            for opt in (*param.opts, *param.secondary_opts):
                shown = re.search(rf"(?<![\w-]){re.escape(opt)}(\s+-[\w-]+)*\s+<", text)
                assert shown is None, f"{where}: {opt} is followed by a value: {shown.group(0)}"
    assert "<bool>" not in flat, f"{where}: a flag shown as taking a value"


def test_flags_take_no_value():
    """`--json true` is a usage error: the help must not suggest it takes a value."""
    result = runner.invoke(app, ["versions", "--json", "true"])
    assert result.exit_code == 2
