"""params.yaml, validated: one pydantic section per stage, unknown keys are errors.

A typo such as ``split.eval.clases`` fails with ``params.yaml: split.eval.clases: Extra inputs
are not permitted`` instead of silently falling back to a default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from compat.backfill.config import UpgradeConfig
from compat.data.config import DataParams, EmbeddedData
from compat.data.split import SplitParams
from compat.errors import BadInputError, NotFoundError
from compat.evaluate.config import EvaluateConfig
from compat.train.config import TrainConfig

PARAMS_FILE = "params.yaml"


class Params(BaseModel):
    """The whole of params.yaml; each stage reads only its own section."""

    model_config = ConfigDict(extra="forbid")

    data: DataParams = Field(default_factory=EmbeddedData)
    split: SplitParams = SplitParams()
    train: dict[str, TrainConfig] = Field(default_factory=dict)
    upgrade: dict[str, UpgradeConfig] = Field(default_factory=dict)
    evaluate: EvaluateConfig | None = None


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


def format_validation_error(
    path: str | os.PathLike[str], err: ValidationError, raw: Any = None, prefix: str = ""
) -> str:
    """One line per problem: ``file: dotted.field: reason``."""
    lines = []
    for e in err.errors():
        field = ".".join(x for x in [prefix, *_field_path(e["loc"], raw)] if x)
        lines.append(f"{path}: {field or '(root)'}: {e['msg']}")
    return "; ".join(lines)


def read_yaml(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"{path}: file not found")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise BadInputError(f"{path}: not valid YAML{where}") from None


def load_params(path: str | os.PathLike[str] = PARAMS_FILE) -> Params:
    """Validate the whole params file."""
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise BadInputError(f"{path}: (root): expected a mapping of sections")
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise BadInputError(format_validation_error(path, err, raw)) from None


def validate_with(model: Any, data: Any, path: str | os.PathLike[str], prefix: str = "") -> Any:
    """Validate ``data`` against a pydantic model or type, naming file and field on error."""
    try:
        return TypeAdapter(model).validate_python(data)
    except ValidationError as err:
        raise BadInputError(format_validation_error(path, err, data, prefix)) from None
