"""params.yaml, validated: one pydantic section per stage, unknown keys are errors.

A typo such as ``split.eval.clases`` fails with ``params.yaml: split.eval.clases: Extra inputs
are not permitted`` instead of silently falling back to a default.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from compat.config import format_validation_error, read_yaml, validate_with
from compat.data.config import DataParams, EmbeddedData
from compat.data.split import SplitParams
from compat.errors import BadInputError
from compat.evaluate.config import EvaluateConfig
from compat.train.config import TrainConfig
from compat.train.upgrade_config import UpgradeConfig

PARAMS_FILE = "params.yaml"

__all__ = ["PARAMS_FILE", "Params", "load_params", "read_yaml", "validate_with"]


class Params(BaseModel):
    """The whole of params.yaml; each stage reads only its own section."""

    model_config = ConfigDict(extra="forbid")

    data: DataParams = Field(default_factory=EmbeddedData)
    split: SplitParams = SplitParams()
    train: dict[str, TrainConfig] = Field(default_factory=dict)
    upgrade: dict[str, UpgradeConfig] = Field(default_factory=dict)
    evaluate: EvaluateConfig | None = None


def load_params(path: str | os.PathLike[str] = PARAMS_FILE) -> Params:
    """Validate the whole params file."""
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise BadInputError(f"{path}: (root): expected a mapping of sections")
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise BadInputError(format_validation_error(path, err, raw)) from None
