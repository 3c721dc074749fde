"""Declared scenario relations: they hold on what ``assign`` builds, and the data expectations
generated from them catch a split that breaks any one of them, naming the relation."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compat.data.expectations import DataValidationError, validate_split
from compat.data.scenarios import (
    Chain,
    ClassCount,
    ClassPrefix,
    Disjoint,
    Equal,
    Incremental,
    ItemsPerClass,
    Relation,
    Replay,
    Share,
    Subset,
    TwoVersion,
    _take,
)
from compat.data.split import EvalSplit, SplitParams, build_split

KINDS = ["extended-data", "open-data", "extended-class", "open-class", "identical-data"]
EVAL = EvalSplit(classes=16, pairs=120, open_set_fraction=0.25)


def _holds(r: Relation, sets: dict, label_of, n_pool: int, n_items: dict) -> bool:
    """An oracle written apart from the GX translation: does relation ``r`` hold on ``sets``
    (name -> (items, class order))?"""

    def members(name: str, unit: str) -> set[str]:
        items, classes = sets[name]
        return set(classes if unit == "classes" else items)

    items, classes = sets[r.a]
    have = Counter(label_of(i) for i in items)
    if isinstance(r, Disjoint):
        return not members(r.a, r.unit) & members(r.b, r.unit)
    if isinstance(r, Subset):
        return members(r.a, r.unit) <= members(r.b, r.unit)
    if isinstance(r, Equal):
        return members(r.a, r.unit) == members(r.b, r.unit)
    if isinstance(r, ClassPrefix):
        return sets[r.b][1][: len(classes)] == classes
    if isinstance(r, ClassCount):
        want = r.count if isinstance(r.count, int) else r.count.of(n_pool)
        return len(classes) == want
    if isinstance(r, ItemsPerClass):
        return all(have[c] == r.share.of(n_items[c]) for c in classes)
    if isinstance(r, Replay):
        old_items, old_classes = sets[r.earlier]
        counts = all(
            have[c] == (min(r.memory, n_items[c]) if c in old_classes else n_items[c])
            for c in classes
        )
        return counts and all(i in old_items for i in items if label_of(i) in old_classes)
    raise AssertionError(f"no oracle for {type(r).__name__}")


def _scenarios(n_classes: int) -> list:
    """Every scenario kind, sized to fit a pool of ``n_classes`` classes."""
    per = max(1, n_classes // 5)
    return [
        *(TwoVersion(kind=k, old_fraction=0.3, old=f"{k}-o", new=f"{k}-n") for k in KINDS),
        Chain(kind="chain", fractions={"c1": 0.2, "c2": 0.6, "c3": 1.0}),
        Chain(kind="chain", unit="data", fractions={"d1": 0.3, "d2": 0.3, "d3": 0.9}),
        Incremental(
            kind="incremental", initial=per, per_task=per, tasks=3, memory=2, cumulative=[1, 3]
        ),
        Incremental(  # a pre-training set capped below most classes' sizes
            kind="incremental",
            initial=per,
            per_task=per,
            tasks=2,
            memory=1,
            prefix="p",
            pretrain=per,
            pretrain_images=3,
        ),
    ]


# ---- Share: the rounding assign uses -----------------------------------------------------------


@given(st.integers(2, 200), st.floats(0.01, 0.99))
def test_share_cuts_as_assign_cuts(n, frac):
    assert Share().of(n) == n
    assert Share(fraction=frac).of(n) == _take(n, frac)
    k = min(_take(n, frac), n - 1)  # TwoVersion's cut: the new version keeps at least one
    assert Share(fraction=frac, spare=1).of(n) == k
    assert Share(fraction=frac, spare=1, rest=True).of(n) == n - k


@given(st.integers(1, 200), st.integers(1, 300), st.floats(0.01, 1.0))
def test_share_keeps_at_most_most(n, most, frac):
    assert Share(most=most).of(n) == min(n, most)  # the pre-training cap: pool[c][:most]
    assert Share(fraction=frac, most=most).of(n) == min(_take(n, frac), most)


def test_share_says_what_it_holds():
    assert str(Share()) == "all"
    assert str(Share(most=30)) == "all (at most 30)"
    assert str(Share(fraction=0.25, spare=1)) == "25% (at least 1 left out)"
    assert str(Share(fraction=0.25, spare=1, rest=True)) == "what 25% (at least 1 left out) leaves"


# ---- declarations hold on what assign builds ---------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(2, 9), min_size=5, max_size=30), st.floats(0.05, 0.95))
def test_declared_relations_hold_for_assign(sizes, frac):
    pool = {f"c{c}": [f"c{c}/{i}" for i in range(n)] for c, n in enumerate(sizes)}
    n_items = {c: len(v) for c, v in pool.items()}
    for sc in _scenarios(len(pool)):
        if isinstance(sc, TwoVersion):
            sc = sc.model_copy(update={"old_fraction": frac})
        sets = sc.assign(pool)
        relations = sc.relations()
        assert {r.a for r in relations} == set(sc.names())  # every set is constrained
        for r in relations:
            assert _holds(r, sets, lambda i: i.split("/")[0], len(pool), n_items), (sc.kind, r)


@pytest.mark.parametrize("scenario", _scenarios(24), ids=lambda s: f"{s.kind}-{s.names()[0]}")
def test_declared_relations_hold_on_a_real_split(tiny_source, scenario):
    params = SplitParams(eval=EVAL, scenarios=[scenario])
    manifests, _ = build_split(tiny_source, params)
    sets = {n: (m.items, m.classes) for n, m in manifests.items()}
    label_of = {it.id: it.label for it in tiny_source.items}.__getitem__
    n_items = Counter(it.label for it in tiny_source.items)
    for r in scenario.relations():
        assert _holds(r, sets, label_of, 40 - 16, n_items), r


def test_every_relation_kind_has_a_translation():
    from compat.data import suite

    kinds = set(Relation.__subclasses__())
    assert kinds == {Disjoint, Subset, Equal, ClassPrefix, ClassCount, ItemsPerClass, Replay}
    assert kinds <= set(suite._TRANSLATIONS)


def test_relations_are_params_like():
    with pytest.raises(ValueError, match="Extra inputs"):
        Subset(a="x", b="y", unit="items", why="t", c=1)
    with pytest.raises(ValueError):
        Disjoint(a="x", b="y", unit="labels", why="t")


# ---- every relation kind catches a tampered manifest, naming the relation ----------------------


def _move_class(m, cls: str) -> None:
    """Drop class ``cls`` and its items from manifest ``m``."""
    keep = [k for k, label in enumerate(m.labels) if label != cls]
    m.items[:] = [m.items[k] for k in keep]
    m.labels[:] = [m.labels[k] for k in keep]
    m.classes.remove(cls)


def _drop_item(m, item: str) -> None:
    k = m.items.index(item)
    del m.items[k], m.labels[k]


def _tamper_disjoint_items(ms):  # an old image moved into the new set (open-data)
    old, new = ms["od-old"], ms["od-new"]
    new.items.append(old.items[0])
    new.labels.append(old.labels[0])


def _tamper_disjoint_classes(ms):  # an old class (with an image) put into the new set (open-class)
    old, new = ms["oc-old"], ms["oc-new"]
    new.items.append(old.items[0])
    new.labels.append(old.labels[0])
    new.classes.append(old.labels[0])


def _tamper_subset_items(ms):  # an old image missing from the new set (extended-data)
    old = ms["ed-old"]
    _drop_item(ms["ed-new"], old.items[0])


def _tamper_subset_classes(ms):  # a class of v1 dropped from v2 (chain)
    _move_class(ms["v2"], ms["v1"].classes[0])


def _tamper_equal_items(ms):  # an image dropped from one of two identical sets
    _drop_item(ms["id-new"], ms["id-new"].items[-1])


def _tamper_equal_classes(ms):  # a class dropped from a cumulative set
    _move_class(ms["t2-all"], ms["t2-all"].classes[-1])


def _tamper_prefix(ms):  # the new head reorders the old classes (extended-class)
    new = ms["ec-new"]
    new.classes[0], new.classes[1] = new.classes[1], new.classes[0]


def _tamper_share_count(ms):  # one class too many in the old open-class set
    old, new = ms["oc-old"], ms["oc-new"]
    moved = new.classes[0]
    for i, label in zip(new.items, new.labels, strict=True):
        if label == moved:
            old.items.append(i)
            old.labels.append(label)
    old.classes.append(moved)
    _move_class(new, moved)


def _tamper_exact_count(ms):  # a task loses a class
    _move_class(ms["t1"], ms["t1"].classes[-1])


def _tamper_items_per_class(ms):  # the old open-data set loses an image
    _drop_item(ms["od-old"], ms["od-old"].items[-1])


def _tamper_replay_count(ms):  # a task replays one image too few of an earlier class
    t2, t3 = ms["t2"], ms["t3"]
    _drop_item(t3, next(i for i, c in zip(t3.items, t3.labels, strict=True) if c == t2.classes[0]))


def _tamper_replay_source(ms, source_items):  # a replayed image the earlier task did not keep
    t2, t3 = ms["t2"], ms["t3"]
    k = t3.labels.index(t2.classes[1])  # a class of t1: t2 kept 2 of its 6 images
    t3.items[k] = next(i for i in source_items[t2.classes[1]] if i not in t2.items)


TAMPERS = [
    (_tamper_disjoint_items, "[od-new] no item shared with od-old (open-data): 1 unexpected"),
    (_tamper_disjoint_classes, "[oc-new classes] classes disjoint from oc-old's (open-class): 1"),
    (_tamper_subset_items, "[ed-old] items a subset of ed-new's (extended-data): 1 unexpected"),
    (_tamper_subset_classes, "[v1 classes] classes a subset of v2's (chain): 1 unexpected"),
    (_tamper_equal_items, "[id-old] same items as id-new (identical-data): 1 unexpected"),
    (_tamper_equal_classes, "[t2 classes] same classes as t2-all (cumulative): 1 unexpected"),
    (_tamper_prefix, "[ec-old classes] class order a prefix of ec-new's (extended-class)"),
    (
        _tamper_share_count,
        "[oc-old classes] 30% (at least 1 left out) of the pool's classes (open-class): "
        "observed 8, expected 7 of 24",
    ),
    (_tamper_exact_count, "[t1 classes] 4 classes (incremental): observed 3"),
    (_tamper_items_per_class, "[od-old classes] 30% (at least 1 left out) of each class's items"),
    (_tamper_replay_count, "[t3 classes] replays 2 items of each of t2's classes"),
    (_tamper_replay_source, "[t3] replayed items are t2's (incremental): 1 unexpected"),
]

BROKEN = [
    TwoVersion(kind="extended-data", old="ed-old", new="ed-new"),
    TwoVersion(kind="open-data", old="od-old", new="od-new"),
    TwoVersion(kind="extended-class", old="ec-old", new="ec-new"),
    TwoVersion(kind="open-class", old="oc-old", new="oc-new"),
    TwoVersion(kind="identical-data", old="id-old", new="id-new"),
    Chain(kind="chain", fractions={"v1": 0.25, "v2": 0.5}),
    Incremental(kind="incremental", initial=4, per_task=3, tasks=3, memory=2, cumulative=[2]),
]


@pytest.fixture(scope="module")
def broken_split(tiny_source):
    """One split of every scenario, every relation kind broken somewhere, validated once."""
    params = SplitParams(eval=EVAL, scenarios=BROKEN)
    manifests, ev = build_split(tiny_source, params)
    source_items: dict[str, list[str]] = {}
    for it in tiny_source.items:
        source_items.setdefault(it.label, []).append(it.id)
    for tamper, _ in TAMPERS:
        if tamper is _tamper_replay_source:
            tamper(manifests, source_items)
        else:
            tamper(manifests)
    with pytest.raises(DataValidationError) as info:
        validate_split(tiny_source, params, manifests, ev)
    return str(info.value)


@pytest.mark.parametrize("expected", [e for _, e in TAMPERS], ids=[t.__name__ for t, _ in TAMPERS])
def test_a_broken_relation_is_caught_and_named(broken_split, expected):
    assert expected in broken_split, broken_split


def test_an_expectation_that_cannot_run_is_an_error_not_a_data_failure():
    import great_expectations as gx
    import pandas as pd

    from compat.data.expectations import failures_of, run_suite
    from compat.data.suite import context, expect

    context()
    suite = gx.ExpectationSuite(
        name="s",
        expectations=[
            expect("f", "fine", gx.expectations.ExpectColumnValuesToBeUnique(column="x")),
            expect("f", "broken", gx.expectations.ExpectColumnValuesToBeNull(column="missing")),
        ],
    )
    result = run_suite(pd.DataFrame({"x": [1, 2]}), suite)
    with pytest.raises(RuntimeError, match=r"'\[f\] broken' on f could not run"):
        failures_of(result)


def test_training_set_names_that_look_like_frame_names(tiny_source):
    # A training set may be called like a held-out set's part, another set's class list or the
    # source (as far as names that become paths allow: no spaces, so "v2 classes" itself cannot
    # be one): the frame tells rows apart by their kind, not by the set's name.
    params = SplitParams(
        eval=EVAL,
        scenarios=[
            Chain(kind="chain", fractions={"eval-pairs": 0.3, "v2-classes": 0.6, "source": 1.0})
        ],
    )
    manifests, ev = build_split(tiny_source, params)
    validate_split(tiny_source, params, manifests, ev)
