"""Reading YAML and reporting pydantic validation errors the same way everywhere.

params.yaml, contracts and loss parameters are all validated by pydantic models with
``extra="forbid"``; every problem is reported as one ``file: dotted.field: reason`` line, so a typo
such as ``split.eval.clases`` names the file and the key instead of silently using a default.
This module is the ground floor: it imports nothing else from compat but the errors.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from compat.errors import BadInputError, NotFoundError


def _field_path(loc: tuple, raw: Any) -> list[str]:
    """The dotted path as the user wrote it: discriminated unions put their tag (e.g. ``embedded``)
    into pydantic's location although it is not a key in the file, so such elements are dropped."""
    out: list[str] = []
    node = raw
    for part in loc:
        if isinstance(node, dict) and part not in node and node.get("kind") == part:
            continue
        out.append(str(part))
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            node = None
    return out


def validation_problems(
    where: str | os.PathLike[str], err: ValidationError, raw: Any = None, prefix: str = ""
) -> list[str]:
    """One ``where: dotted.field: reason`` line per problem pydantic found.

    ``prefix`` is the dotted path of the validated object inside the file (e.g. ``evaluate``);
    ``raw`` is the data as the user wrote it, so tags of discriminated unions are left out.
    """
    lines = []
    for e in err.errors():
        field = ".".join(x for x in [prefix, *_field_path(e["loc"], raw)] if x)
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {field or '(root)'}: {msg}")
    return lines


def format_validation_error(
    where: str | os.PathLike[str], err: ValidationError, raw: Any = None, prefix: str = ""
) -> str:
    """Every problem of :func:`validation_problems` on one line, separated by ``; ``."""
    return "; ".join(validation_problems(where, err, raw, prefix))


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """The parsed YAML of ``path``: NotFoundError if it is missing, BadInputError if it does not parse."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"{path}: file not found")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise BadInputError(f"{path}: not valid YAML{where}") from None


def validate_with(model: Any, data: Any, path: str | os.PathLike[str], prefix: str = "") -> Any:
    """Validate ``data`` against a pydantic model or type, naming file and field on error."""
    try:
        return TypeAdapter(model).validate_python(data)
    except ValidationError as err:
        raise BadInputError(format_validation_error(path, err, data, prefix)) from None
