"""The incremental scenario's pre-training set: its own classes, disjoint from every task's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compat.data.expectations import DataValidationError, validate_split
from compat.data.scenarios import Incremental
from compat.data.split import EvalSplit, SplitParams, build_split


def _pool(n_classes: int, per_class: int) -> dict[str, list[str]]:
    return {f"c{c}": [f"c{c}/{i}" for i in range(per_class)] for c in range(n_classes)}


def test_pretrain_takes_the_first_classes_by_hand():
    inc = Incremental(kind="incremental", initial=2, per_task=1, tasks=2, memory=1, pretrain=3)
    sets = inc.assign(_pool(7, 2))
    assert inc.names() == ["pretrain", "t1", "t2"]
    assert list(sets) == inc.names()
    assert sets["pretrain"] == (
        ["c0/0", "c0/1", "c1/0", "c1/1", "c2/0", "c2/1"],
        ["c0", "c1", "c2"],
    )
    assert sets["t1"] == (["c3/0", "c3/1", "c4/0", "c4/1"], ["c3", "c4"])
    assert sets["t2"] == (["c3/0", "c4/0", "c5/0", "c5/1"], ["c3", "c4", "c5"])  # c6 unused


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 3), st.integers(1, 4))
def test_pretrain_is_disjoint_from_every_task(pretrain, initial, per_task, tasks):
    pool = _pool(pretrain + initial + per_task * (tasks - 1), 3)
    inc = Incremental(
        kind="incremental", initial=initial, per_task=per_task, tasks=tasks, memory=2,
        pretrain=pretrain, cumulative=[tasks],
    )  # fmt: skip
    sets = inc.assign(pool)
    ids, classes = sets["pretrain"]
    assert len(classes) == pretrain
    assert sorted(ids) == sorted(i for c in classes for i in pool[c])
    for name in inc.names()[1:]:
        assert not set(classes) & set(sets[name][1]), name
    # without it the tasks are what they were: the pre-training classes are simply taken first
    plain = Incremental(
        kind="incremental", initial=initial, per_task=per_task, tasks=tasks, memory=2,
        cumulative=[tasks],
    ).assign({c: pool[c] for c in list(pool)[pretrain:]})  # fmt: skip
    assert {k: v for k, v in sets.items() if k != "pretrain"} == plain


def test_pretrain_needs_its_classes_and_a_name_of_its_own():
    with pytest.raises(ValueError, match="needs 6 training classes"):
        Incremental(kind="incremental", initial=2, per_task=1, tasks=2, pretrain=3).assign(
            _pool(5, 2)
        )
    with pytest.raises(ValueError, match="pretrain_name"):
        Incremental(kind="incremental", pretrain=2, pretrain_name="t1")


def test_split_declares_and_checks_the_disjointness(tiny_source):
    params = SplitParams(
        eval=EvalSplit(classes=16, pairs=100, open_set_fraction=0.0),
        scenarios=[
            Incremental(kind="incremental", initial=4, per_task=3, tasks=3, memory=2, pretrain=5)
        ],
    )
    manifests, ev = build_split(tiny_source, params)
    validate_split(tiny_source, params, manifests, ev)  # the declared relations hold
    assert not set(manifests["pretrain"].classes) & set(ev.labels)
    # a pre-training class leaking into a task is caught
    leaked = manifests["t2"].model_copy(
        update={"classes": [*manifests["t2"].classes, manifests["pretrain"].classes[0]]}
    )
    with pytest.raises(DataValidationError, match="pretrain"):
        validate_split(tiny_source, params, {**manifests, "t2": leaked}, ev)


def test_pretrain_images_keeps_the_first_of_each_class_by_hand():
    inc = Incremental(
        kind="incremental", initial=1, per_task=1, tasks=2, memory=1, pretrain=2, pretrain_images=2
    )
    sets = inc.assign(_pool(4, 3))
    assert sets["pretrain"] == (["c0/0", "c0/1", "c1/0", "c1/1"], ["c0", "c1"])
    # the tasks keep every image of their new classes: the cap is the pre-training set's alone
    assert sets["t1"] == (["c2/0", "c2/1", "c2/2"], ["c2"])
    assert sets["t2"] == (["c2/0", "c3/0", "c3/1", "c3/2"], ["c2", "c3"])


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 8))
def test_pretrain_images_caps_only_the_pretraining_set(pretrain, per_class, cap):
    pool = _pool(pretrain + 3, per_class)
    kw = dict(kind="incremental", initial=2, per_task=1, tasks=2, memory=1, pretrain=pretrain)
    capped = Incremental(**kw, pretrain_images=cap).assign(pool)
    every = Incremental(**kw).assign(pool)
    ids, classes = capped["pretrain"]
    assert classes == every["pretrain"][1]
    assert len(ids) == pretrain * min(cap, per_class)  # the size the cap implies
    assert set(ids) <= set(every["pretrain"][0])
    assert {k: v for k, v in capped.items() if k != "pretrain"} == {
        k: v for k, v in every.items() if k != "pretrain"
    }


def test_pretrain_images_needs_a_pretraining_set():
    with pytest.raises(ValueError, match="pretrain_images: set, but there is no pre-training"):
        Incremental(kind="incremental", pretrain_images=5)
    with pytest.raises(ValueError, match="pretrain_images"):
        Incremental(kind="incremental", pretrain=2, pretrain_images=0)


def test_split_checks_the_pretraining_cap(tiny_source):
    params = SplitParams(
        eval=EvalSplit(classes=16, pairs=100, open_set_fraction=0.0),
        scenarios=[
            Incremental(
                kind="incremental",
                initial=4,
                per_task=3,
                tasks=2,
                memory=2,
                pretrain=5,
                pretrain_images=3,
            )
        ],
    )
    manifests, ev = build_split(tiny_source, params)
    validate_split(tiny_source, params, manifests, ev)  # the declared cap holds
    pre = manifests["pretrain"]
    assert len(pre.items) == 5 * 3
    # one image more of a pre-training class than the cap allows is caught, naming the set
    source_ids = {}
    for it in tiny_source.items:
        source_ids.setdefault(it.label, []).append(it.id)
    extra = next(i for i in source_ids[pre.classes[0]] if i not in set(pre.items))
    grown = pre.model_copy(
        update={"items": [*pre.items, extra], "labels": [*pre.labels, pre.classes[0]]}
    )
    with pytest.raises(DataValidationError, match=r"pretrain.*at most 3"):
        validate_split(tiny_source, params, {**manifests, "pretrain": grown}, ev)
