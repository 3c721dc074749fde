"""Properties every scenario promises (UniBCT Table 1, BCT chains, CL2R task sequences)."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compat.data.scenarios import Chain, Incremental, TwoVersion


def _pool(n_classes: int, per_class: int) -> dict[str, list[str]]:
    return {f"c{c}": [f"c{c}/{i}" for i in range(per_class)] for c in range(n_classes)}


def _classes(ids: list[str]) -> set[str]:
    return {i.split("/")[0] for i in ids}


pools = st.builds(_pool, st.integers(2, 30), st.integers(2, 12))
fractions = st.floats(0.05, 0.95)


def implied(n: int, frac: float) -> int:
    """The size a fraction of n things implies: frac * n to the nearest integer (halves to even,
    as Python rounds), kept in 1..n."""
    return min(n, max(1, round(frac * n)))


def _per_class(ids: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in ids:
        c = i.split("/")[0]
        out[c] = out.get(c, 0) + 1
    return out


@pytest.mark.parametrize(
    ("kind", "old_per_class", "new_per_class", "old_classes", "new_classes"),
    [  # 10 classes of 10 images, old_fraction 0.3
        ("extended-data", 3, 10, 10, 10),
        ("open-data", 3, 7, 10, 10),
        ("extended-class", 10, 10, 3, 10),
        ("open-class", 10, 10, 3, 7),
        ("identical-data", 3, 3, 10, 10),  # UniBCT: both versions on the old version's share
    ],
)
def test_two_version_sizes_by_hand(kind, old_per_class, new_per_class, old_classes, new_classes):
    sets = TwoVersion(kind=kind, old_fraction=0.3).assign(_pool(10, 10))
    (old, old_cls), (new, new_cls) = sets["old"], sets["new"]
    assert (len(old_cls), len(new_cls)) == (old_classes, new_classes)
    assert set(_per_class(old).values()) == {old_per_class}
    assert set(_per_class(new).values()) == {new_per_class}
    assert len(old) == old_classes * old_per_class and len(new) == new_classes * new_per_class


@settings(max_examples=60, deadline=None)
@given(pools, fractions)
def test_two_version_scenarios(pool, frac):
    all_items = {i for v in pool.values() for i in v}
    n_cls = len(pool)
    per = len(next(iter(pool.values())))
    for kind in ("extended-data", "open-data", "extended-class", "open-class", "identical-data"):
        sets = TwoVersion(kind=kind, old_fraction=frac).assign(pool)
        (old, old_cls), (new, new_cls) = sets["old"], sets["new"]
        assert old and new
        # the sizes the fraction implies (class-based kinds leave the new version one class;
        # open-data leaves it one image per class)
        if kind in ("extended-data", "identical-data"):
            assert set(_per_class(old).values()) == {implied(per, frac)}
        if kind == "open-data":
            k = min(implied(per, frac), per - 1)
            assert set(_per_class(old).values()) == {k}
            assert set(_per_class(new).values()) == {per - k}
        if kind in ("extended-class", "open-class"):
            k = min(implied(n_cls, frac), n_cls - 1)
            assert len(old_cls) == k
            assert len(new_cls) == (n_cls if kind == "extended-class" else n_cls - k)
        assert len(set(old)) == len(old) and len(set(new)) == len(new)
        assert _classes(old) == set(old_cls) and _classes(new) == set(new_cls)
        if kind == "extended-data":
            assert set(old) < set(new) or set(old) == set(new)
            assert set(new) == all_items and set(old_cls) == set(new_cls) == set(pool)
        if kind == "open-data":
            assert not set(old) & set(new)
            assert set(old) | set(new) == all_items
            assert set(old_cls) == set(new_cls) == set(pool)
        if kind == "extended-class":
            assert set(old_cls) < set(new_cls)
            assert new_cls[: len(old_cls)] == old_cls  # class indices of the parent are kept
        if kind == "open-class":
            assert not set(old_cls) & set(new_cls)
            assert set(old_cls) | set(new_cls) == set(pool)
        if kind == "identical-data":
            assert old == new and set(old_cls) == set(pool)


@settings(max_examples=40, deadline=None)
@given(
    pools,
    st.lists(st.floats(0.05, 1.0), min_size=1, max_size=4),
    st.sampled_from(["classes", "data"]),
)
def test_chain_is_nested(pool, fracs, unit):
    fracs = sorted(fracs)
    chain = Chain(kind="chain", unit=unit, fractions={f"v{k + 1}": f for k, f in enumerate(fracs)})
    sets = chain.assign(pool)
    names = chain.names()
    per = len(next(iter(pool.values())))
    for name, frac in chain.fractions.items():
        ids, classes = sets[name]
        if unit == "classes":
            assert len(classes) == implied(len(pool), frac)
            assert set(_per_class(ids).values()) == {per}
        else:
            assert len(classes) == len(pool)
            assert set(_per_class(ids).values()) == {implied(per, frac)}
    for a, b in itertools.pairwise(names):
        assert set(sets[a][0]) <= set(sets[b][0])
        assert sets[b][1][: len(sets[a][1])] == sets[a][1]


def test_chain_fractions_must_not_decrease():
    with pytest.raises(ValueError, match="must not decrease"):
        Chain(kind="chain", fractions={"v1": 0.5, "v2": 0.25})


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(1, 5), st.integers(0, 3))
def test_incremental_tasks(initial, per_task, tasks, memory):
    pool = _pool(initial + per_task * tasks + 1, 6)
    inc = Incremental(
        kind="incremental", initial=initial, per_task=per_task, tasks=tasks, memory=memory
    )
    sets = inc.assign(pool)
    assert list(sets) == inc.names()
    seen: list[str] = []
    for t, name in enumerate(inc.names()):
        ids, classes = sets[name]
        new = classes[len(seen) :]
        assert classes[: len(seen)] == seen  # the head's earlier classes keep their indices
        assert len(new) == (initial if t == 0 else per_task)
        for c in new:
            assert sum(i.startswith(c + "/") for i in ids) == 6
        for c in seen:
            assert sum(i.startswith(c + "/") for i in ids) == min(memory, 6)
        seen = classes


def test_incremental_needs_enough_classes():
    with pytest.raises(ValueError, match="needs 12 training classes"):
        Incremental(kind="incremental", initial=4, per_task=4, tasks=3).assign(_pool(5, 2))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 5), st.integers(0, 3), st.data())
def test_incremental_cumulative_sets_hold_everything_seen(initial, per_task, tasks, memory, data):
    cumulative = data.draw(st.lists(st.integers(1, tasks), unique=True, max_size=tasks))
    pool = _pool(initial + per_task * tasks, 5)
    inc = Incremental(
        kind="incremental",
        initial=initial,
        per_task=per_task,
        tasks=tasks,
        memory=memory,
        cumulative=cumulative,
    )
    sets = inc.assign(pool)
    tasks_names = [f"t{t}" for t in range(1, tasks + 1)]
    assert inc.names() == tasks_names + [f"t{t}-all" for t in sorted(cumulative)]
    assert list(sets) == inc.names()
    for t in cumulative:
        ids, classes = sets[f"t{t}-all"]
        assert classes == sets[f"t{t}"][1]  # same class order as the task: same head indices
        assert sorted(ids) == sorted(i for c in classes for i in pool[c])  # no replay limit
        assert set(sets[f"t{t}"][0]) <= set(ids)
    # the task sets do not change when cumulative sets are added
    plain = Incremental(
        kind="incremental", initial=initial, per_task=per_task, tasks=tasks, memory=memory
    ).assign(pool)
    assert all(sets[n] == plain[n] for n in plain)


@pytest.mark.parametrize(
    ("cumulative", "match"),
    [([0], r"cumulative: tasks must lie in 1\.\.3"), ([4], "1..3"), ([2, 2], "listed twice")],
)
def test_incremental_cumulative_is_validated(cumulative, match):
    with pytest.raises(ValueError, match=match):
        Incremental(kind="incremental", tasks=3, cumulative=cumulative)
