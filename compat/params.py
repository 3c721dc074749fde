"""params.yaml, validated: one pydantic section per stage, unknown keys are errors.

A typo such as ``split.eval.clases`` fails with ``params.yaml: split.eval.clases: Extra inputs
are not permitted`` instead of silently falling back to a default.

Every stage script reads its own section with :func:`read_section`, so a stage never fails on
(or depends on) another stage's settings. This module imports nothing from compat but
:mod:`compat.config` and :mod:`compat.errors` at import time: each stage's script names the
config model it validates with, and the whole-file model of :func:`load_params` imports every
section's model only when it is used (tests and tools; no stage needs it).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from compat.config import format_validation_error, read_yaml, validate_with
from compat.errors import BadInputError, NotFoundError

if TYPE_CHECKING:
    from pydantic import BaseModel

PARAMS_FILE = "params.yaml"
# The top-level sections of a pipeline's params.yaml, one per stage (the fields of Params;
# tests/test_params.py checks they agree).
PARAMS_SECTIONS = ("data", "split", "train", "upgrade", "evaluate")

__all__ = [
    "PARAMS_FILE",
    "PARAMS_SECTIONS",
    "load_params",
    "read_section",
    "read_yaml",
    "validate_with",
]

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
    they have always printed). An explicit null section is validated like any value, so it is
    an error unless the model accepts None; a null *mapping* of keyed entries (``train:`` with
    nothing under it) holds no entries.

    ``sections``: when given, every top-level key of the file must be one of these. A stage
    whose section has a default passes the pipeline's sections, so a typo such as ``spilt:``
    is an error instead of a silent fall-back to the defaults.
    """
    raw = read_yaml(path)
    if raw is None:
        raw = {}
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


@cache
def _params_model() -> type[BaseModel]:
    """The whole of params.yaml as one model (built on first use: it imports every section's
    model, which no single stage needs)."""
    from pydantic import BaseModel, ConfigDict, Field

    from compat.data.config import DataParams, EmbeddedData
    from compat.data.split import SplitParams
    from compat.evaluate.config import EvaluateConfig
    from compat.train.config import TrainConfig
    from compat.train.upgrade_config import UpgradeConfig

    class Params(BaseModel):
        """The whole of params.yaml; each stage reads only its own section."""

        model_config = ConfigDict(extra="forbid")

        data: DataParams = Field(default_factory=EmbeddedData)
        split: SplitParams = Field(default_factory=SplitParams)
        train: dict[str, TrainConfig] = Field(default_factory=dict)
        upgrade: dict[str, UpgradeConfig] = Field(default_factory=dict)
        evaluate: EvaluateConfig | None = None

    return Params


def load_params(path: str | os.PathLike[str] = PARAMS_FILE) -> Any:
    """Validate the whole params file (every section; an unknown section is an error).

    Returns a ``Params`` model: ``.data``, ``.split``, ``.train``, ``.upgrade``, ``.evaluate``.
    """
    from pydantic import ValidationError

    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise BadInputError(f"{path}: (root): expected a mapping of sections")
    try:
        return _params_model().model_validate(raw)
    except ValidationError as err:
        raise BadInputError(format_validation_error(path, err, raw)) from None
