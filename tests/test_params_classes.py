"""Whole classes of bad params, not only the cases in tests/test_bad_input.py (issue 30): every
float field of every params and contract model refuses NaN and infinities, and every field
that holds a name which becomes a path refuses ``..`` and path separators."""

from __future__ import annotations

import math
import typing

import pytest
from pydantic import BaseModel, ValidationError

from compat.contracts.schema import Contract, Criterion, Rollback, Serve
from compat.data.config import EmbeddedData, FolderData, ManifestData
from compat.data.render import Distortion
from compat.data.scenarios import Chain, Incremental, TwoVersion
from compat.data.split import EvalSplit, SplitParams
from compat.evaluate.config import EvaluateConfig
from compat.losses import LOSSES
from compat.maps.card import MAP_KINDS
from compat.maps.psi_config import UpgradeConfig
from compat.names import Name
from compat.train.config import AugmentConfig, TrainConfig


def _kind_params(kind: str) -> type[BaseModel]:
    from compat.maps.kinds import kind_module

    module = kind_module(kind)
    return next(
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == module.__name__
    )


# Each model with the smallest valid input it accepts.
MODELS: list[tuple[type[BaseModel], dict]] = [
    (EmbeddedData, {}),
    (FolderData, {"kind": "folder", "root": "x"}),
    (ManifestData, {"kind": "manifest", "manifest": "x.csv"}),
    (Distortion, {}),
    (EvalSplit, {}),
    (SplitParams, {}),
    (TwoVersion, {"kind": "open-class"}),
    (Chain, {"kind": "chain"}),
    (Incremental, {"kind": "incremental"}),
    (TrainConfig, {}),
    (AugmentConfig, {}),
    (UpgradeConfig, {}),
    (EvaluateConfig, {"chain": ["v1"]}),
    (Criterion, {"protocol": "identification", "metric": "top1"}),
    (Rollback, {}),
    (Contract, {"version": "v1", "embedding_dim": 8, "head": "cosface"}),
    (Serve, {}),
]
MODELS += [(LOSSES.get(name).Params, {}) for name in LOSSES.names()]
MODELS += [(_kind_params(kind), {}) for kind in MAP_KINDS]


def _has(annotation: object, target: object) -> bool:
    """Whether ``target`` appears anywhere in a (possibly nested) annotation."""
    if annotation is target:
        return True
    return any(_has(a, target) for a in typing.get_args(annotation))


NAME_CHECK = typing.get_args(Name)[1]  # the AfterValidator of compat.names.Name


def _is_name(info: object) -> bool:
    """A field typed Name, Name | None or list[Name] (pydantic keeps Name's validator either
    in the field's metadata or inside its annotation)."""
    return NAME_CHECK in getattr(info, "metadata", []) or _has(info.annotation, Name)


def _fields(pick: typing.Callable[[object], bool]) -> list[tuple[type[BaseModel], dict, str]]:
    out = []
    for model, base in MODELS:
        for name, info in model.model_fields.items():
            if pick(info) and typing.get_origin(info.annotation) is not dict:
                out.append((model, base, info.alias or name))
    return out


FLOATS = _fields(lambda info: _has(info.annotation, float))
NAMES = _fields(_is_name)
INTS = _fields(lambda info: _has(info.annotation, int) and not _has(info.annotation, bool))

# Sizes bounded by a check against the source's real size instead of a constant (issue 30 case
# 10; each has a case in tests/test_bad_input.py): how many images the source renders, how many
# evaluation classes and pairs the split draws.
BOUNDED_BY_THE_SOURCE = {
    ("EmbeddedData", "images_per_class"),
    ("EvalSplit", "classes"),
    ("EvalSplit", "pairs"),
    ("Incremental", "cumulative"),  # task numbers, each within 1..tasks
}


def test_the_classes_are_not_empty():
    assert len(FLOATS) >= 30 and len(NAMES) >= 8 and len(INTS) >= 40


@pytest.mark.parametrize("model,base,field", INTS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_every_size_param_has_an_upper_bound(model, base, field):
    """A size with no bound allocates whatever it is told (``dim: 10**12`` was a torch
    traceback): every int field refuses 10**13, unless a check against the source bounds it."""
    if (model.__name__, field) in BOUNDED_BY_THE_SOURCE:
        return
    annotation = model.model_fields[
        next(k for k, v in model.model_fields.items() if (v.alias or k) == field)
    ].annotation
    value = [10**13] if typing.get_origin(annotation) is list else 10**13
    with pytest.raises(ValidationError) as err:
        model.model_validate({**base, field: value})
    assert any(e["loc"][:1] == (field,) for e in err.value.errors()), err.value


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("model,base,field", FLOATS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_every_float_param_refuses_non_finite_values(model, base, field, value):
    with pytest.raises(ValidationError) as err:
        model.model_validate({**base, field: value})
    assert any(e["loc"][:1] == (field,) for e in err.value.errors()), err.value


@pytest.mark.parametrize("bad", ["../escaped", "a/b", "..", "none"])
@pytest.mark.parametrize("model,base,field", NAMES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_every_name_param_refuses_a_path(model, base, field, bad):
    annotation = model.model_fields[
        next(k for k, v in model.model_fields.items() if (v.alias or k) == field)
    ].annotation
    value = [bad] if typing.get_origin(annotation) is list else bad
    with pytest.raises(ValidationError):
        model.model_validate({**base, field: value})


@pytest.mark.parametrize(
    "model,base,field,key",
    [
        (Chain, {"kind": "chain"}, "fractions", "../v1"),
        (EvaluateConfig, {"chain": ["v1"]}, "paragon", "../p"),
        (EvaluateConfig, {"chain": ["v1"]}, "forward", "../v2"),
    ],
)
def test_every_name_keyed_mapping_refuses_a_path(model, base, field, key):
    value = {key: 1.0} if field == "fractions" else {key: "x"}
    with pytest.raises(ValidationError):
        model.model_validate({**base, field: value})
