"""The validation set: classes disjoint from the evaluation set and from every training set,
built like the evaluation set, deterministic, and leaving the evaluation classes unchanged."""

from __future__ import annotations

import pytest

from compat.data.expectations import DataValidationError, validate_split
from compat.data.scenarios import Chain
from compat.data.split import (
    EvalSplit,
    SplitParams,
    build_split,
    build_validation,
    load_eval_manifest,
    write_split,
)
from compat.errors import BadInputError


def _params(validation: int | None = 8, **kw) -> SplitParams:
    return SplitParams(
        eval=EvalSplit(classes=12, pairs=60),
        validation=EvalSplit(classes=validation, pairs=40) if validation else None,
        scenarios=[Chain(kind="chain", fractions={"v1": 0.5, "v2": 1.0})],
        **kw,
    )


def test_validation_classes_are_disjoint_from_training_and_evaluation(tiny_source):
    params = _params()
    manifests, ev = build_split(tiny_source, params)
    va = build_validation(tiny_source, params)
    assert va is not None
    validate_split(tiny_source, params, manifests, ev, va)  # every expectation holds
    val_classes, eval_classes = set(va.labels), set(ev.labels)
    train_classes = {c for m in manifests.values() for c in m.classes}
    assert len(val_classes) == 8 and len(eval_classes) == 12
    assert not val_classes & eval_classes and not val_classes & train_classes
    assert not set(va.items) & set(ev.items)
    assert not set(va.items) & {i for m in manifests.values() for i in m.items}
    # Every class of the source is in exactly one of the three.
    assert len(val_classes | eval_classes | train_classes) == 40 == 8 + 12 + len(train_classes)
    # Built like the evaluation set: queries, gallery and balanced pairs.
    assert va.query and va.gallery and not set(va.query) & set(va.gallery)
    assert all((va.labels[a] == va.labels[b]) == s for a, b, s in va.pairs)


def test_adding_validation_keeps_the_evaluation_set_and_is_deterministic(tiny_source):
    _, ev_without = build_split(tiny_source, _params(validation=None))
    manifests, ev_with = build_split(tiny_source, _params())
    assert ev_with == ev_without  # the same evaluation classes, items and pairs
    assert len(manifests["v2"].classes) == 40 - 12 - 8
    assert build_validation(tiny_source, _params()) == build_validation(tiny_source, _params())
    other = build_validation(tiny_source, _params(seed=1))
    assert set(other.labels) != set(build_validation(tiny_source, _params()).labels)
    assert build_validation(tiny_source, _params(validation=None)) is None


def test_validation_is_written_and_loads_like_the_evaluation_set(tiny_source, tmp_path):
    params = _params()
    write_split(tmp_path, *build_split(tiny_source, params), build_validation(tiny_source, params))
    assert load_eval_manifest(tmp_path / "validation.json") == build_validation(tiny_source, params)
    write_split(tmp_path / "none", *build_split(tiny_source, _params(validation=None)))
    assert not (tmp_path / "none" / "validation.json").exists()


def test_too_many_held_out_classes_name_the_validation_field(tiny_source):
    # one message naming both keys and what fits
    with pytest.raises(
        BadInputError,
        match=r"^split\.eval\.classes \(12 -> 12\) and split\.validation\.classes \(27 -> 27\): "
        r"39 held-out classes leave fewer than 2 training classes \(the source has 40\); "
        r"hold out at most 38",
    ):
        build_split(tiny_source, _params(validation=27))
    with pytest.raises(ValueError, match="'validation' is reserved"):
        SplitParams(scenarios=[Chain(kind="chain", fractions={"validation": 1.0})])


def test_the_validation_set_passes_through_the_held_out_expectations(tiny_source):
    """The validation set meets the evaluation set's expectations and the disjointness ones:
    a broken one is named with its frame and the offending values."""
    params = _params()
    manifests, ev = build_split(tiny_source, params)
    va = build_validation(tiny_source, params)
    leaked = va.labels[va.gallery[0]]  # a validation class put into training
    v2 = manifests["v2"]
    item = next(i for i, label in zip(va.items, va.labels, strict=True) if label == leaked)
    grown = v2.model_copy(
        update={"items": [*v2.items, item], "labels": [*v2.labels, leaked],
                "classes": sorted({*v2.classes, leaked})}
    )  # fmt: skip
    with pytest.raises(
        DataValidationError, match=r"\[training sets\] no validation class in training"
    ):
        validate_split(tiny_source, params, {**manifests, "v2": grown}, ev, va)
    shared = va.model_copy(update={"labels": [ev.labels[0], *va.labels[1:]]})
    with pytest.raises(DataValidationError, match=r"\[validation\] no evaluation class in"):
        validate_split(tiny_source, params, manifests, ev, shared)
    flipped = va.model_copy(update={"pairs": [(a, b, not s) for a, b, s in va.pairs]})
    with pytest.raises(DataValidationError, match=r"\[validation-pairs\] pair flags agree"):
        validate_split(tiny_source, params, manifests, ev, flipped)
