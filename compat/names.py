"""Names that become paths: versions, training sets, and the files made from them.

A version name is a registry key, a folder (``models/<version>/``), a manifest
(``splits/<name>.json``) and a tag; a name such as ``../../escaped`` would write outside the
project. Every such name, wherever it is read (params, contracts, the command line), obeys one
rule: a letter or digit, then up to 63 letters, digits, ``.``, ``_`` or ``-``, never ``..``,
never ``none`` (``--against none`` means "production is unset"). :data:`Name` is that rule as a
pydantic type, so params validation names the file and the field (exit 4).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

VERSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RULE = "use letters, digits, '.', '_' or '-' (at most 64, no '..', no path separators, not 'none')"


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid name, or None."""
    if not isinstance(name, str):
        return f"expected a name, got {type(name).__name__}"
    if not VERSION_NAME.fullmatch(name) or ".." in name or name.lower() == "none":
        return f"name {name!r}: {RULE}"
    return None


def _check(name: str) -> str:
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


Name = Annotated[str, AfterValidator(_check)]


def inside(path: str | os.PathLike[str], root: str | os.PathLike[str] = ".") -> Path:
    """``path`` if it resolves inside ``root`` (symlinks followed), else ValueError: an output
    computed from names must never land outside the project."""
    p, r = Path(path).resolve(), Path(root).resolve()
    if p != r and r not in p.parents:
        raise ValueError(f"{path}: resolves to {p}, outside {r}")
    return Path(path)


__all__ = ["RULE", "VERSION_NAME", "Name", "inside", "name_problem"]
