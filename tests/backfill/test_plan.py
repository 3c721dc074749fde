"""Row versions and which rows a (partial) backfill picks."""

from __future__ import annotations

import numpy as np
import pytest

from compat.backfill.plan import (
    bundle_version,
    check_rows,
    row_order,
    row_versions,
    select_rows,
    target_count,
)
from compat.errors import BadInputError


def test_row_versions_resolution():
    assert row_versions("v1", None, 3) == ["v1"] * 3
    assert row_versions("v1", ["v1", "v2"], 2) == ["v1", "v2"]  # per-row wins
    assert row_versions(None, None, 2, assume="v1") == ["v1", "v1"]
    with pytest.raises(BadInputError, match="records no version"):
        row_versions(None, None, 2, where="g.npz")
    assert bundle_version(["v2", "v2"]) == "v2" and bundle_version(["v1", "v2"]) is None


def test_check_rows_names_the_offending_row():
    check_rows(["v1", "v2", "v1"], "v1", "v2")
    with pytest.raises(
        BadInputError, match=r"g.npz: version: row 0 was made by 'v0', not by --from 'v1'"
    ):
        check_rows(["v0", "v0"], "v1", "v2", "g.npz")
    with pytest.raises(BadInputError, match=r"row_versions: row 2 was made by 'v3'"):
        check_rows(["v1", "v2", "v3"], "v1", "v2", "g.npz")


def test_target_count_is_floor_of_fraction_times_rows():
    assert [target_count(10, f) for f in (0, 0.25, 0.5, 0.75, 1)] == [0, 2, 5, 7, 10]
    assert target_count(3, 1 / 3) == 1  # no float fuzz below the exact product
    with pytest.raises(BadInputError):
        target_count(10, 1.5)


def test_oldest_first_takes_the_first_rows():
    sel = select_rows(["v1"] * 10, "v1", "v2", fraction=0.3)
    assert sel.rows.tolist() == [0, 1, 2] and sel.already == 0 and sel.after == 3


def test_random_order_is_seeded_and_extends_across_fractions():
    v = ["v1"] * 40
    a = select_rows(v, "v1", "v2", fraction=0.25, order="random", seed=3).rows
    b = select_rows(v, "v1", "v2", fraction=0.5, order="random", seed=3).rows
    c = select_rows(v, "v1", "v2", fraction=0.25, order="random", seed=4).rows
    assert len(a) == 10 and b[:10].tolist() == a.tolist()
    assert sorted(a.tolist()) != sorted(c.tolist())
    assert sorted(row_order(40, "random", 3).tolist()) == list(range(40))


def test_rows_already_upgraded_count_towards_the_fraction():
    v = ["v2", "v2", "v1", "v1", "v1", "v1", "v1", "v1", "v1", "v1"]
    assert select_rows(v, "v1", "v2", fraction=0.5).rows.tolist() == [2, 3, 4]
    assert select_rows(v, "v1", "v2", fraction=0.1).rows.tolist() == []  # already past it
    full = select_rows(v, "v1", "v2", fraction=1.0)
    assert full.rows.tolist() == list(range(2, 10)) and full.after == 10
    # the next step of a random-order backfill continues the same permutation
    rnd = select_rows(["v1"] * 20, "v1", "v2", fraction=0.25, order="random", seed=0).rows
    step = np.array(["v1"] * 20, dtype=object)
    step[rnd] = "v2"
    more = select_rows(list(step), "v1", "v2", fraction=0.5, order="random", seed=0).rows
    assert set(more) | set(rnd) == set(
        select_rows(["v1"] * 20, "v1", "v2", fraction=0.5, order="random", seed=0).rows
    )
