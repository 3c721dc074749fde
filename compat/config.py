"""Reading YAML and reporting pydantic validation errors the same way everywhere.

params.yaml, contracts and loss parameters are all validated by pydantic models with
``extra="forbid"``; every problem is reported as one ``file: dotted.field: reason`` line, so a typo
such as ``split.eval.clases`` names the file and the key instead of silently using a default.
This module is the ground floor: it imports nothing else from compat but the errors.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import TypeAdapter, ValidationError

from compat.errors import BadInputError, NotFoundError
from compat.files import read_regular_bytes


def _field_path(loc: tuple, raw: Any) -> list[str]:
    """The dotted path as the user wrote it: discriminated unions put their tag (e.g. ``embedded``)
    into pydantic's location although it is not a key in the file, so such elements are dropped."""
    out: list[str] = []
    node = raw
    for part in loc:
        if part == "[key]":  # pydantic's marker of a dict key's own error: the key is named
            continue
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


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names the same key twice (YAML 1.2 forbids it; PyYAML keeps the last)."""

    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(f"key {key!r} given twice (lines {first} and {second})")
        self.key, self.first, self.second = key, first, second


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a duplicate key instead of silently keeping the last one
    (``size: 32`` then ``size: 16`` would otherwise train at 16 with no word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise DuplicateKeyError(key, seen[key], line)
            except TypeError:  # an unhashable key: the base class reports it
                break
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _key_path(node: Any, line: int, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The dotted path of the mapping key that starts on ``line`` (1-based) under ``node``."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            here = (*path, str(key_node.value))
            if key_node.start_mark.line + 1 == line:
                return here
            found = _key_path(value, line, here)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _key_path(item, line, (*path, str(i)))
            if found:
                return found
    return None


def load_yaml_text(text: str) -> Any:
    """Parse YAML text safely (a SafeLoader), refusing duplicate keys
    (:class:`DuplicateKeyError`, whose ``key`` is then the dotted path, e.g. ``data.size``)."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except DuplicateKeyError as err:
        dotted = _key_path(yaml.compose(text, Loader=yaml.SafeLoader), err.second)
        if dotted:
            err.key = ".".join(dotted)
        raise


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """The parsed YAML of ``path``: NotFoundError if it is missing, BadInputError if it does not
    parse or names a key twice in one mapping (both lines named)."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"{path}: file not found")
    try:
        raw = read_regular_bytes(path, "a YAML file")
    except PermissionError:
        raise BadInputError(f"{path}: permission denied") from None
    try:
        return load_yaml_text(raw.decode("utf-8"))
    except DuplicateKeyError as err:
        raise BadInputError(f"{path}: {err.key}: {err}") from None
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise BadInputError(f"{path}: not valid UTF-8 at line {line}") from None
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


T = TypeVar("T")
_REQUIRED: Any = object()  # read_section's "no default": a missing section is NotFoundError


def _known(names: Collection[str]) -> str:
    return ", ".join(sorted(map(str, names))) or "none"


def read_section(
    path: str | os.PathLike[str],
    section: str,
    model: type[T] | Any,
    key: str | None = None,
    *,
    default: Any = _REQUIRED,
    missing: str | None = None,
    sections: Collection[str] | None = None,
) -> T:
    """``section`` (or ``section.key``) of the params file ``path``, validated against ``model``.

    Only that part of the file is validated: another pipeline's sections (or another stage's) in
    the same file are none of this stage's business. Errors name the file and the dotted field
    (``params.yaml: train.v2.epochs: ...``, BadInputError, exit 4).

    A missing section (or, with ``key``, a missing entry of the section) is NotFoundError
    (exit 3) listing the known ones, unless ``default`` is given: then that is returned
    (e.g. ``SplitParams()``, or None for "not configured"). ``missing`` overrides the words of
    that error; ``{known}`` in it is replaced by the known names (the stages keep the messages
    they have always printed). An empty file is BadInputError: a truncated or blank params file
    must not silently mean "every default". An explicit null section is validated like any value, so it is
    an error unless the model accepts None; a null *mapping* of keyed entries (``train:`` with
    nothing under it) holds no entries.

    ``sections``: when given, every top-level key of the file must be one of these. A stage
    whose section has a default passes the pipeline's sections, so a typo such as ``spilt:``
    is an error instead of a silent fall-back to the defaults.
    """
    raw = read_yaml(path)
    if raw is None:  # an empty file is a mistake (a truncated copy), not "all defaults"
        raise BadInputError(f"{path}: (root): the file is empty; expected a mapping of sections")
    if not isinstance(raw, dict):
        raise BadInputError(f"{path}: (root): expected a mapping of sections")
    if sections is not None:
        unknown = [str(k) for k in raw if k not in sections]
        if unknown:
            raise BadInputError(
                f"{path}: {unknown[0]}: Extra inputs are not permitted (sections: "
                f"{', '.join(sections)})"
            )
    where = section if key is None else f"{section}.{key}"
    if key is None:
        if section not in raw:
            if default is not _REQUIRED:
                return default
            words = missing or "section missing (known: {known})"
            raise NotFoundError(f"{path}: {where}: {words.format(known=_known(raw))}")
        data = raw[section]
    else:
        entries = raw.get(section)
        if entries is None:
            entries = {}
        if not isinstance(entries, dict):
            raise BadInputError(f"{path}: {section}: expected a mapping of names to settings")
        if key not in entries:
            if default is not _REQUIRED:
                return default
            words = missing or "not found (known: {known})"
            raise NotFoundError(f"{path}: {where}: {words.format(known=_known(entries))}")
        data = entries[key]
    return validate_with(model, data, path, prefix=where)
