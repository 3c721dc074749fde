"""What the CLI prints: tables and messages for people, JSON for scripts, a step summary for CI.

Three rules hold for every command:

- **Never truncated.** On a terminal a table is drawn by rich when it fits at the width of its
  longest words; when it does not, a table that has a folded layout (the gate's checks: a few
  columns whose cells wrap, :data:`FOLDED_CHECK_COLUMNS`, 90 columns at most) is drawn folded;
  only when that does not fit either (a narrow terminal) is each row printed as a block of
  ``name: value`` lines that wrap. Off a terminal (a pipe, a CI log, typer's test runner) rich
  would draw at 80 columns and cut every number to ``0.…``, so tables are printed as markdown
  rows instead, whole, one line per row, greppable and pasteable.
- **Rounded and worded for people.** Metric values 4 decimals, differences signed, gains in
  percent; None is ``-``, booleans ``yes``/``no``. Stored text (tags, descriptions) is escaped
  before rich sees it, so ``[ok]`` stays ``[ok]`` instead of vanishing as markup.
- **Numbers as numbers in JSON.** :func:`echo_json` writes one object, NaN and infinities as
  ``null``; checks are objects (:func:`check_object`), never sentences.

``GITHUB_STEP_SUMMARY`` (GitHub Actions) names a markdown file a job may append to;
:func:`append_step_summary` appends to it.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

# --- formatting values for people ----------------------------------------------------------


def fmt_value(x: float | None, digits: int = 4) -> str:
    """A metric value (a fraction) rounded for people; ``n/a`` when undefined."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def fmt_diff(x: float | None, digits: int = 4) -> str:
    """A signed difference of two metric values, rounded."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:+.{digits}f}"


def fmt_percent(x: float | None, digits: int = 1) -> str:
    """A fraction shown as a percentage (update gain, shares)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{100 * x:.{digits}f}%"


def human(x: Any) -> str:
    """Any value as people read it: never ``None``, ``True`` or ``False``; floats rounded."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return fmt_value(x)
    return str(x)


# --- consoles ------------------------------------------------------------------------------


def console(stderr: bool = False) -> Any:
    """A rich console that never cuts text: off a terminal it does not wrap at 80 columns
    (``soft_wrap``), and it never highlights or colours numbers on its own."""
    from rich.console import Console

    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=True)
    return c


def say(message: str, style: str | None = None, *, stderr: bool = False) -> None:
    """Print one message; its text is never read as rich markup."""
    from rich.text import Text

    console(stderr).print(Text(message, style=style or ""))


# --- tables --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Styled:
    """A cell with a style on a terminal (``green``, ``red``); plain text elsewhere."""

    text: str
    style: str = ""

    def __str__(self) -> str:
        return self.text


Cell = str | Styled


@dataclass(frozen=True)
class Column:
    name: str
    numeric: bool = False


def _columns(columns: Sequence[str | Column]) -> list[Column]:
    return [c if isinstance(c, Column) else Column(c) for c in columns]


def _md(cell: Cell) -> str:
    return str(cell).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: Sequence[str | Column], rows: Iterable[Sequence[Cell]]) -> str:
    """GitHub-flavoured markdown rows (header, rule, one line per row), numbers right-aligned."""
    cols = _columns(columns)
    lines = [
        "| " + " | ".join(_md(c.name) for c in cols) + " |",
        "|" + "|".join("---:" if c.numeric else "---" for c in cols) + "|",
    ]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _text(cell: Cell) -> Any:
    from rich.text import Text

    if isinstance(cell, Styled):
        return Text(cell.text, style=cell.style)
    return Text(str(cell))


def _rich_table(
    title: str | None,
    cols: list[Column],
    rows: Sequence[Sequence[Cell]],
    caption: str | None,
    show_header: bool,
) -> Any:
    from rich.table import Table

    table = Table(
        title=_text(title) if title else None,
        caption=_text(caption) if caption else None,
        show_header=show_header,
    )
    for c in cols:
        table.add_column(c.name, justify="right" if c.numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*(_text(cell) for cell in row))
    return table


def _fits(width: int, cols: list[Column], rows: Sequence[Sequence[Cell]]) -> bool:
    """Whether a boxed rich table fits ``width`` without breaking any word (a number is one
    word): each column as wide as its longest word, plus a border and two spaces a column."""
    from rich.cells import cell_len

    def longest(text: str) -> int:
        return max((cell_len(w) for w in text.split()), default=0)

    needed = 1 + sum(
        3 + max([longest(c.name)] + [longest(str(row[i])) for row in rows])
        for i, c in enumerate(cols)
    )
    return needed <= width


def print_table(
    columns: Sequence[str | Column],
    rows: Sequence[Sequence[Cell]],
    *,
    title: str | None = None,
    caption: str | None = None,
    show_header: bool = True,
    folded: tuple[Sequence[str | Column], Sequence[Sequence[Cell]]] | None = None,
) -> None:
    """A table on stdout, never truncated (see the module docstring for the layouts);
    ``folded``: the same rows in fewer, wrapping columns, drawn on a terminal too narrow for
    the full table."""
    from rich.text import Text

    cols = _columns(columns)
    con = console()
    if not con.is_terminal:
        out = [title] if title else []
        if show_header:
            out.append(markdown_table(cols, rows))
        else:  # a key-value table: one ``key: value`` line each
            out += [": ".join(str(cell) for cell in row) for row in rows]
        if caption:
            out.append(caption)
        typer.echo("\n".join(out))
        return
    if _fits(con.width, cols, rows):
        con.print(_rich_table(title, cols, rows, caption, show_header))
        return
    if folded is not None and _fits(con.width, _columns(folded[0]), folded[1]):
        con.print(_rich_table(title, _columns(folded[0]), folded[1], caption, show_header))
        return
    # Narrow terminal: one block per row, every value whole and wrapped by rich.
    if title:
        con.print(Text(title, style="bold"))
    for row in rows:
        if not show_header:  # a key-value table: ``key: value``
            con.print(Text(f"{row[0]}: ").append_text(_text(" ".join(map(str, row[1:])))))
            continue
        for i, (col, cell) in enumerate(zip(cols, row, strict=True)):
            line = Text(("- " if i == 0 else "  ") + f"{col.name}: ")
            con.print(line.append_text(_text(cell)))
    if caption:
        con.print(Text(caption))


# --- JSON ----------------------------------------------------------------------------------


def jsonable(obj: Any) -> Any:
    """Plain JSON values: NaN and infinities become null, paths and other objects strings."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, bool | int | str) or obj is None:
        return obj
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # a numpy scalar
        return jsonable(obj.item())
    return str(obj)


def echo_json(obj: Any) -> None:
    """Exactly one JSON object on stdout (sorted keys, numbers as numbers)."""
    sys.stdout.write(json.dumps(jsonable(obj), sort_keys=True, allow_nan=False) + "\n")
    sys.stdout.flush()


def as_int(value: Any) -> int | None:
    """A registry string such as a tag's ``"128"`` as a number; None when it is not one."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def as_float(value: Any) -> float | None:
    try:
        x = float(str(value))
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


# --- checks --------------------------------------------------------------------------------


def check_object(criterion: Mapping[str, Any]) -> dict[str, Any]:
    """One checked criterion of a gate report (``compat.contracts.gate.CriterionResult`` as a
    dict) as the documented check object (:func:`compat.contracts.gate.check_object`)."""
    from compat.contracts.gate import check_object as gate_check

    return gate_check(dict(criterion))


def fmt_gain(value: float | None, meaningful: bool | None) -> str:
    """A check's update gain for people: ``55.0%``, ``131.3% (not meaningful)``, or ``-``."""
    if value is None:
        return "-"
    return fmt_percent(value) + ("" if meaningful else " (not meaningful)")


CHECK_COLUMNS = (
    Column("protocol"),
    Column("metric"),
    Column("gallery"),
    Column("require"),
    Column("margin", numeric=True),
    Column("confidence", numeric=True),
    Column("new", numeric=True),
    Column("baseline", numeric=True),
    Column("difference", numeric=True),
    Column("lower bound", numeric=True),
    Column("gain", numeric=True),
    Column("verdict"),
)


def _gallery(check: Mapping[str, Any]) -> str:
    role = check.get("role")
    return check["gallery"] + (f" ({role})" if role in ("transitive", "rollback") else "")


def _verdict_cell(check: Mapping[str, Any], markdown: bool) -> Cell:
    """``pass``, ``FAIL``, or ``accepted`` (a rollback loss accepted with --accept-loss)."""
    verdict = check.get("verdict")
    if verdict == "pass":
        return "pass" if markdown else Styled("pass", "green")
    if verdict == "accepted":
        return "**accepted**" if markdown else Styled("accepted", "yellow")
    return "**FAIL**" if markdown else Styled("FAIL", "red")


def check_cells(check: Mapping[str, Any], *, markdown: bool = False) -> list[Cell]:
    """One check as a table row of :data:`CHECK_COLUMNS`: the one layout of a check that
    ``promote``, ``show``, ``chain`` and the step summary print."""
    gallery = _gallery(check)
    margin, conf = check.get("margin"), check.get("confidence")
    verdict = _verdict_cell(check, markdown)
    return [
        check["protocol"],
        check["metric"],
        gallery,
        human(check.get("require")),
        "-" if margin is None else f"{margin:g}",
        "-" if conf is None else f"{conf:g}",
        fmt_value(check.get("new")),
        fmt_value(check.get("baseline")),
        fmt_diff(check.get("difference")),
        fmt_diff(check.get("lower_bound")) if conf is not None else "-",
        fmt_gain(check.get("gain"), check.get("gain_meaningful")),
        verdict,
    ]


# The same checks in fewer columns whose cells wrap, for a terminal narrower than the full
# table (about 155 columns): what is checked against which gallery, the rule with its margin
# and confidence, the two cells, the difference with its lower bound, the gain and the verdict.
# Each column is as wide as its longest word at least, 90 columns in all.
FOLDED_CHECK_COLUMNS = (
    Column("check"),
    Column("require"),
    Column("new", numeric=True),
    Column("baseline", numeric=True),
    Column("difference", numeric=True),
    Column("gain", numeric=True),
    Column("verdict"),
)


def folded_check_cells(check: Mapping[str, Any]) -> list[Cell]:
    """One check as a row of :data:`FOLDED_CHECK_COLUMNS` (the values of :func:`check_cells`)."""
    margin, conf = check.get("margin"), check.get("confidence")
    rule = human(check.get("require"))
    if margin:
        rule += f", margin {margin:g}"
    if conf is not None:
        rule += f", at {conf:g}"
    difference = fmt_diff(check.get("difference"))
    if conf is not None:
        difference += f" (bound {fmt_diff(check.get('lower_bound'))})"
    gain = check.get("gain")
    return [
        f"{check['protocol']} {check['metric']} on {_gallery(check)}",
        rule,
        fmt_value(check.get("new")),
        fmt_value(check.get("baseline")),
        difference,
        "-"
        if gain is None
        else fmt_percent(gain) + ("" if check.get("gain_meaningful") else " not meaningful"),
        _verdict_cell(check, False),
    ]


def outcome_text(report: Mapping[str, Any]) -> str:
    """What a gate did to production, in words, for its last line and its step summary:
    ``production -> v3 (rollback)``, ``production unchanged``, or for a dry run what the
    real run would do."""
    version = report["version"]
    kind = " (rollback)" if report.get("rollback") else ""
    if report.get("dry_run"):
        if report.get("passed") and report.get("would_move"):
            return f"dry run, nothing recorded; the real run moves production -> {version}{kind}"
        return "dry run, nothing recorded; production unchanged"
    if report.get("passed") and report.get("moved"):
        return f"production -> {version}{kind}"
    return "production unchanged"


def gain_line(protocol: str, metric: str, gain: Mapping[str, Any]) -> str:
    """``update gain identification top1 vs v3-paragon: 55.0% (criterion holds)`` (BCT Eq. 9);
    a gain that means nothing says why (a failed check, a paragon weaker than the version)."""
    head = f"update gain {protocol} {metric} vs {gain.get('paragon')}: "
    value = gain.get("value")
    if value is None:
        return head + f"undefined ({gain.get('reason')})"
    if gain.get("meaningful"):
        return head + f"{fmt_percent(value)} ({gain.get('reason')})"
    return head + f"{fmt_percent(value)}, not meaningful: {gain.get('reason')}"


# --- the GitHub Actions step summary -------------------------------------------------------


def promote_summary(report: Mapping[str, Any], run_url: str | None = None) -> str:
    """A markdown summary of a promote report: the verdict, one row per check (the layout of
    :func:`check_cells`), every update gain with its reason, and a link to the version's
    MLflow run when ``run_url`` is known."""
    version, parent = report["version"], report.get("parent")
    outcome = outcome_text(report)
    verdict = "PASSED" if report.get("passed") else "FAILED"
    rollback = report.get("rollback")
    if rollback:
        against = f" (rollback from {rollback['from']})"
    else:
        against = f" vs {parent}" if parent else ""
    lines = [f"### compat promote {version}{against}: {verdict} ({outcome})", ""]
    checks = report.get("checks") or [check_object(c) for c in report.get("criteria", [])]
    if not checks:
        lines.append(f"{version} has no parent: no criteria to check.")
    else:
        lines.append(markdown_table(CHECK_COLUMNS, [check_cells(c, markdown=True) for c in checks]))
    gains = [
        gain_line(p, m, g) for p, per in report.get("gain", {}).items() for m, g in per.items()
    ]
    extra = gains + list(report.get("messages", []))
    if extra:
        lines.append("")
    lines += [f"- {_md(m)}" for m in extra]
    if run_url:
        lines += ["", f"MLflow run of {version}: {run_url}"]
    elif report.get("run_id"):  # a store no browser reaches by URL: the id finds it in the UI
        lines += ["", f"MLflow run of {version}: `{report['run_id']}`"]
    return "\n".join(lines) + "\n\n"


def error_summary(command: str, message: str, exit_code: int) -> str:
    """A markdown summary of a command that ended in an error (no verdict was reached)."""
    return f"### {command}: error (exit {exit_code})\n\n{_md(message)}\n\n"


def append_step_summary(markdown: str) -> Path | None:
    """Append to the file ``GITHUB_STEP_SUMMARY`` names, if set; a failure to write is a
    warning on stderr, never a change of the command's exit code."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(markdown)
    except OSError as err:
        print(f"warning: {path}: step summary not written: {err.strerror}", file=sys.stderr)
        return None
    return path
