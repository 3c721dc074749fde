"""params.yaml, validated: one pydantic section per stage, unknown keys are errors.

A typo such as ``split.eval.clases`` fails with ``params.yaml: split.eval.clases: Extra inputs
are not permitted`` instead of silently falling back to a default.

Every stage script reads its own section with :func:`compat.config.read_section`, so a stage never fails on
(or depends on) another stage's settings. This module imports nothing from compat but
:mod:`compat.config` and :mod:`compat.errors` at import time: each stage's script names the
config model it validates with, and the whole-file model of :func:`load_params` imports every
section's model only when it is used (tests and tools; no stage needs it).
"""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING, Any

from compat.config import format_validation_error, read_section, read_yaml, validate_with
from compat.errors import BadInputError

if TYPE_CHECKING:
    from pydantic import BaseModel

PARAMS_FILE = "params.yaml"
# The top-level sections of a pipeline's params.yaml, one per stage (the fields of Params;
# tests/test_params.py checks they agree).
PARAMS_SECTIONS = ("data", "split", "train", "upgrade", "adapt", "evaluate")

__all__ = [
    "PARAMS_FILE",
    "PARAMS_SECTIONS",
    "load_params",
    "read_section",
    "read_yaml",
    "validate_with",
]


@cache
def _params_model() -> type[BaseModel]:
    """The whole of params.yaml as one model (built on first use: it imports every section's
    model, which no single stage needs)."""
    from pydantic import BaseModel, ConfigDict, Field

    from compat.data.config import DataParams, EmbeddedData
    from compat.data.split import SplitParams
    from compat.evaluate.config import EvaluateConfig
    from compat.maps.adapt_config import AdaptConfig
    from compat.maps.psi_config import UpgradeConfig
    from compat.names import Name
    from compat.train.config import TrainConfig

    class Params(BaseModel):
        """The whole of params.yaml; each stage reads only its own section."""

        model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

        data: DataParams = Field(default_factory=EmbeddedData)
        split: SplitParams = Field(default_factory=SplitParams)
        train: dict[Name, TrainConfig] = Field(default_factory=dict)
        upgrade: dict[Name, UpgradeConfig] = Field(default_factory=dict)
        adapt: dict[Name, AdaptConfig] = Field(default_factory=dict)
        evaluate: EvaluateConfig | None = None

    return Params


def load_params(path: str | os.PathLike[str] = PARAMS_FILE) -> Any:
    """Validate the whole params file (every section; an unknown section is an error).

    An empty file is an error (BadInputError), never "all defaults". Returns a ``Params`` model: ``.data``, ``.split``, ``.train``, ``.upgrade``, ``.adapt``, ``.evaluate``.
    """
    from pydantic import ValidationError

    raw = read_yaml(path)
    if raw is None:
        raise BadInputError(f"{path}: (root): the file is empty; expected a mapping of sections")
    if not isinstance(raw, dict):
        raise BadInputError(f"{path}: (root): expected a mapping of sections")
    try:
        return _params_model().model_validate(raw)
    except ValidationError as err:
        raise BadInputError(format_validation_error(path, err, raw)) from None
