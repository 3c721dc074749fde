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


@settings(max_examples=60, deadline=None)
@given(pools, fractions)
def test_two_version_scenarios(pool, frac):
    all_items = {i for v in pool.values() for i in v}
    for kind in ("extended-data", "open-data", "extended-class", "open-class", "identical-data"):
        sets = TwoVersion(kind=kind, old_fraction=frac).assign(pool)
        (old, old_cls), (new, new_cls) = sets["old"], sets["new"]
        assert old and new
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
            assert old == new


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
