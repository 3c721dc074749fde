#!/usr/bin/env python3
"""The reference pages of the documentation, generated from the code itself.

    python scripts/docs_reference.py           # rewrite the marked blocks of docs/*.md
    python scripts/docs_reference.py --check   # exit 1, naming each block that differs

A block is the text between ``<!-- reference: NAME -->`` and ``<!-- /reference -->``:

- ``cli``: every command of the ``compat`` typer app with its help, arguments, options and exit
  codes (typer's own Markdown generator, ``typer ... utils docs``, on ``compat.cli.main.app``);
- ``params``: every section and key of ``params.yaml`` from the pydantic models the stages
  validate it with (type, bounds, default, the field's description);
- ``contract``: every key of a contract from ``compat.contracts.schema.Contract``.

So the reference cannot drift from the commands and models: tests/test_docs_reference.py runs
``--check``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- reference: ([\w-]+) -->\n)(.*?)(<!-- /reference -->)", re.S)


# --- the command line ----------------------------------------------------------------------


def cli() -> str:
    """typer's Markdown for the whole app, its headings one level down (the page has its own)."""
    import typer
    from typer.cli import get_docs_for_click

    from compat.cli.main import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="compat")
    text = get_docs_for_click(obj=command, ctx=ctx, name="compat")
    lines = []
    fenced = False
    for line in text.strip().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("#"):
            line = "#" + line
        lines.append(line.rstrip())
    return "\n".join(lines)


# --- pydantic models as tables -------------------------------------------------------------


def _rst(text: str) -> str:
    """A docstring's reStructuredText literals and roles as Markdown code, on one line."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    return " ".join(text.split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _anchor(name: str) -> str:
    return name.lower()


def _bounds(s: dict[str, Any]) -> str:
    marks = [("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
             ("exclusiveMaximum", "<"), ("minLength", "length >="), ("maxLength", "length <=")]  # fmt: skip
    parts = [f"{sign} {s[k]:g}" if isinstance(s[k], float) else f"{sign} {s[k]}" for k, sign in marks if k in s]  # fmt: skip
    if "pattern" in s:
        parts.append(f"matching `{s['pattern']}`")
    return f" ({', '.join(parts)})" if parts else ""


def _type(s: dict[str, Any]) -> str:
    """One JSON schema as a short Markdown type: a model is a link to its table."""
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{_anchor(name)})"
    for key in ("anyOf", "oneOf"):
        if key in s:
            kinds = [_type(x) for x in s[key]]
            return " or ".join(dict.fromkeys(kinds))
    if "enum" in s:
        return " | ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    if "const" in s:
        return f"`{json.dumps(s['const'])}`"
    kind = s.get("type")
    if kind == "array":
        return f"list of {_type(s.get('items', {}))}" + _bounds(s)
    if kind == "object":
        extra = s.get("additionalProperties")
        return f"map of name to {_type(extra)}" if isinstance(extra, dict) else "mapping"
    if isinstance(kind, list):
        return " or ".join(kind)
    return (kind or "any") + _bounds(s)


def _default(name: str, s: dict[str, Any], required: set[str]) -> str:
    if name in required:
        return "required"
    if "default" not in s:
        if s.get("type") in ("object", "array"):
            return "empty"
        return "its keys' defaults" if "$ref" in json.dumps(s) else "built by the code"
    return f"`{json.dumps(s['default'])}`"


def _table(name: str, s: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if s.get("description"):
        lines += [_rst(s["description"]), ""]
    required = set(s.get("required", []))
    lines += ["| key | type | default | what it sets |", "|---|---|---|---|"]
    for key, prop in s.get("properties", {}).items():
        row = [f"`{key}`", _type(prop), _default(key, prop, required), _rst(prop.get("description", ""))]  # fmt: skip
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return lines


def _models(schema: dict[str, Any], root: str) -> str:
    """The root model's table, then every model it refers to, in the order first referred to."""
    defs = schema.get("$defs", {})
    order: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref:
                name = ref.rsplit("/", 1)[1]
                if name not in order:
                    order.append(name)
                    walk(defs[name])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in schema.items() if k != "$defs"})
    lines = _table(root, schema)
    for name in order:
        lines += ["", *_table(name, defs[name])]
    return "\n".join(lines)


def params() -> str:
    """Every section of params.yaml (compat.params composes the stages' own models)."""
    from compat.params import _params_model

    return _models(_params_model().model_json_schema(), "Params")


def contract() -> str:
    """Every key of a contract (compat.contracts.schema.Contract)."""
    from compat.contracts.schema import Contract

    return _models(Contract.model_json_schema(), "Contract")


GENERATORS: dict[str, Callable[[], str]] = {"cli": cli, "params": params, "contract": contract}
PAGES = ("cli.md", "params.md", "contracts.md")


def render(text: str, cache: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """``text`` with every reference block regenerated, and the names of those that changed."""
    cache = {} if cache is None else cache
    changed: list[str] = []

    def one(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in GENERATORS:
            raise SystemExit(f"error: block {name!r}: no generator; known: {', '.join(GENERATORS)}")  # fmt: skip
        if name not in cache:
            cache[name] = GENERATORS[name]() + "\n"
        if cache[name] != m.group(3):
            changed.append(name)
        return m.group(1) + cache[name] + m.group(4)

    return BLOCK.sub(one, text), changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a block differs; write nothing")
    a = ap.parse_args(argv)
    cache: dict[str, str] = {}
    stale = []
    for page in PAGES:
        path = DOCS / page
        new, changed = render(path.read_text(encoding="utf-8"), cache)
        if not changed:
            continue
        stale.append(f"{path.relative_to(ROOT)}: {', '.join(changed)}")
        if not a.check:
            from compat.io import atomic_path

            with atomic_path(path) as tmp:
                tmp.write_text(new, encoding="utf-8")
    if a.check:
        if stale:
            print(f"out of date with the code: {'; '.join(stale)}; run python scripts/docs_reference.py", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    print(f"{len(stale)} page(s) rewritten" + (f": {'; '.join(stale)}" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
