"""Searching a partially backfilled gallery: the per-group rule, exact top-k against the full
score matrix, refusals, and that new queries gain from upgraded rows."""

from __future__ import annotations

import numpy as np
import pytest

from compat.embeddings.mixed import (
    calibrated_embeddings,
    mixed_scores,
    query_for,
    search_mixed,
    version_groups,
)
from compat.errors import BadInputError


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_groups_and_query_choice():
    groups = version_groups(["v1", "v2", "v1", "v2", "v2"])
    assert list(groups) == ["v1", "v2"] and groups["v2"].tolist() == [1, 3, 4]
    q = {"v2": np.zeros((2, 4))}
    assert query_for("v2", q) == "v2"
    assert query_for("v1", q, [("v2", "v1")]) == "v2"  # backward compatible: allowed
    with pytest.raises(BadInputError, match="cannot be searched with query embeddings of v2"):
        query_for("v1", q)  # not declared compatible: refused, never guessed
    with pytest.raises(BadInputError):
        query_for("v2", {"v1": np.zeros((2, 4))}, [("v2", "v1")])  # psi is one-way


def test_mixed_scores_by_hand():
    g = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    q_old = np.array([[1.0, 2.0]], np.float32)
    q_new = np.array([[3.0, 0.0]], np.float32)
    s = mixed_scores({"v1": q_old, "v2": q_new}, g, ["v1", "v2", "v1"], calibration="none")
    assert s.tolist() == [[1.0, 0.0, 3.0]]  # rows 0, 2 with the v1 query, row 1 with v2's


def test_match_calibration_by_hand():
    """Group v1's scores of a query are mapped onto its score distribution over group v2."""
    rng = np.random.default_rng(0)
    g = rng.standard_normal((12, 3)).astype(np.float32)
    versions = ["v1"] * 5 + ["v2"] * 7
    q = rng.standard_normal((2, 3)).astype(np.float32)
    s = mixed_scores({"v2": q}, g, versions, [("v2", "v1")])
    raw = q @ g.T
    a, b = raw[:, :5], raw[:, 5:]
    want = b.mean(1, keepdims=True) + (a - a.mean(1, keepdims=True)) * (
        b.std(1, keepdims=True) / a.std(1, keepdims=True)
    )  # per-query moments over each group's rows, computed directly
    np.testing.assert_allclose(s[:, :5], want, atol=1e-5)
    np.testing.assert_allclose(s[:, 5:], b, atol=1e-6)  # the reference group is untouched
    # explicit reference: map v2 onto v1 instead; same order within each query
    s1 = mixed_scores({"v2": q}, g, versions, [("v2", "v1")], reference="v1")
    # s1 is an increasing affine map of s, computed by other float32 operations (a few ulp of
    # |s| < 4, < 1e-5): the orders agree exactly because no two scores of a query are within 1e-3.
    assert np.diff(np.sort(s, 1), axis=1).min() > 1e-3
    np.testing.assert_array_equal(np.argsort(-s1, 1), np.argsort(-s, 1))
    with pytest.raises(BadInputError, match="unknown 'zscore'"):
        mixed_scores({"v2": q}, g, versions, [("v2", "v1")], calibration="zscore")


@pytest.mark.parametrize("calibration", ["match", "none"])
@pytest.mark.parametrize("k", [1, 5, 17])
def test_search_mixed_equals_full_ranking(k, calibration):
    rng = np.random.default_rng(0)
    g = unit(rng.standard_normal((40, 8)))
    versions = list(rng.choice(["v1", "v2"], 40))
    q1, q2 = unit(rng.standard_normal((6, 8))), unit(rng.standard_normal((6, 8)))
    for qs, compat in [({"v2": q2, "v1": q1}, ()), ({"v2": q2}, [("v2", "v1")])]:
        scores, index = search_mixed(qs, g, versions, k, compatible=compat, calibration=calibration)
        ref = mixed_scores(qs, g, versions, compat, calibration=calibration)
        want = -np.sort(-ref, axis=1)[:, :k]
        np.testing.assert_allclose(scores, want, atol=1e-5)
        np.testing.assert_allclose(np.take_along_axis(ref, index, 1), scores, atol=1e-5)


def test_calibrated_embeddings_reproduce_the_match_scores():
    rng = np.random.default_rng(1)
    g = unit(rng.standard_normal((30, 6)))
    ref = rng.random(30) < 0.4
    q = unit(rng.standard_normal((5, 6)))
    versions = ["v2" if r else "v1" for r in ref]
    want = mixed_scores({"v2": q}, g, versions, [("v2", "v1")])
    q2, g2 = calibrated_embeddings(q, g, ref)
    assert q2.shape == (5, 12) and g2.shape == (30, 12)
    np.testing.assert_allclose(q2 @ g2.T, want, atol=1e-5)
    q1, g1 = calibrated_embeddings(q, g, np.zeros(30, bool))  # one group: raw scores
    np.testing.assert_allclose(q1 @ g1.T, q @ g.T, atol=1e-6)


def test_calibration_makes_partial_backfill_rise_steadily():
    """The mechanism measured on the embedded data: cross-model scores v2 . v1 are spread less
    than same-space scores v2 . psi(v1) (here: old rows carry variance the new space does not
    see), so with raw scores upgraded impostors outrank old true matches and top-1 dips below
    the un-upgraded gallery; matched per-query score distributions make it rise steadily."""
    rng = np.random.default_rng(0)
    classes, d = 100, 16
    centers = rng.standard_normal((classes, d))
    zeros = np.zeros((classes, d))
    q = unit(np.hstack([centers + 0.6 * rng.standard_normal((classes, d)), zeros]))
    up = unit(np.hstack([centers + 0.6 * rng.standard_normal((classes, d)), zeros]))
    noisy = centers + 0.9 * rng.standard_normal((classes, d))
    old = unit(np.hstack([noisy, 2.0 * rng.standard_normal((classes, d))]))
    order = rng.permutation(classes)
    acc: dict[str, list[float]] = {"match": [], "none": []}
    for f in (0.0, 0.25, 0.5, 0.75, 1.0):
        mask = np.zeros(classes, bool)
        mask[order[: int(f * classes)]] = True
        g = np.where(mask[:, None], up, old)
        versions = ["v2" if m else "v1" for m in mask]
        for cal in acc:
            _, idx = search_mixed(
                {"v2": q}, g, versions, 1, compatible=[("v2", "v1")], calibration=cal
            )
            acc[cal].append(float((idx[:, 0] == np.arange(classes)).mean()))
    assert np.all(np.diff(acc["match"]) > 0), acc
    assert acc["none"][1] < acc["none"][0], acc  # raw merging dips first


def test_refusals():
    g = np.zeros((3, 4), np.float32)
    with pytest.raises(BadInputError, match="2 entries for 3 rows"):
        mixed_scores({"v1": np.zeros((1, 4))}, g, ["v1", "v1"])
    with pytest.raises(BadInputError, match="8-dim query embeddings cannot score 4-dim"):
        mixed_scores({"v1": np.zeros((1, 8))}, g, ["v1"] * 3)
    with pytest.raises(BadInputError, match="disagree on the number of queries"):
        mixed_scores({"v1": np.zeros((1, 4)), "v2": np.zeros((2, 4))}, g, ["v1"] * 3)
    with pytest.raises(BadInputError, match="k=4"):
        search_mixed({"v1": np.zeros((1, 4))}, g, ["v1"] * 3, 4)


def test_calibrated_embeddings_with_given_stats():
    """Moments passed in (both spaces on the same items) are used as given; equal moments leave
    every score raw."""
    from compat.embeddings.mixed import GroupStats

    rng = np.random.default_rng(5)
    q = rng.standard_normal((4, 6)).astype(np.float32)
    g = rng.standard_normal((30, 6)).astype(np.float32)
    ref = np.arange(30) % 3 == 0
    same = GroupStats.of(g)
    q2, g2 = calibrated_embeddings(q, g, ref, stats=(same, same))
    np.testing.assert_allclose(q2 @ g2.T, q @ g.T, rtol=1e-5, atol=1e-5)
    other = GroupStats.of(2.0 * g + 1.0)
    q3, g3 = calibrated_embeddings(q, g, ref, stats=(same, other))
    mu_r, sd_r = same.moments(q)
    mu_o, sd_o = other.moments(q)
    expected = mu_r[:, None] + (q @ g.T - mu_o[:, None]) * (sd_r / sd_o)[:, None]
    s3 = q3 @ g3.T
    np.testing.assert_allclose(s3[:, ~ref], expected[:, ~ref], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s3[:, ref], (q @ g.T)[:, ref], rtol=1e-5, atol=1e-5)


def test_calibrated_two_spaces_scores_each_group_with_its_own_query():
    """Reference rows (width 6) scored with q_ref, the others (width 4) with q_other, mapped onto
    the reference group's per-query score distribution: checked against the formula by hand."""
    from compat.embeddings.mixed import GroupStats, calibrated_two_spaces

    rng = np.random.default_rng(7)
    n = 40
    q_ref = unit(rng.standard_normal((5, 6))).astype(np.float32)
    q_other = unit(rng.standard_normal((5, 4))).astype(np.float32)
    ref_rows = unit(rng.standard_normal((n, 6))).astype(np.float32)
    other_rows = unit(rng.standard_normal((n, 4)) * [3.0, 1.0, 1.0, 0.2]).astype(np.float32)
    ref = np.arange(n) % 4 == 0
    stats = (GroupStats.of(ref_rows), GroupStats.of(other_rows))
    q2, g2 = calibrated_two_spaces(q_ref, q_other, ref_rows, other_rows, ref, stats)
    assert q2.shape == (5, 10) and g2.shape == (n, 10)
    s = q2 @ g2.T
    ref_scores = q_ref @ ref_rows.T
    raw_other = q_other @ other_rows.T
    r = ref_rows.astype(np.float64)
    o = other_rows.astype(np.float64)
    mu_r = q_ref @ r.mean(0)
    mu_o = q_other @ o.mean(0)
    sd_r = (q_ref @ r.T).std(axis=1)  # the population spread over the rows, as the moments
    sd_o = (q_other @ o.T).std(axis=1)
    expected = mu_r[:, None] + (raw_other - mu_o[:, None]) * (sd_r / sd_o)[:, None]
    np.testing.assert_allclose(s[:, ref], ref_scores[:, ref], atol=1e-5)
    np.testing.assert_allclose(s[:, ~ref], expected[:, ~ref], atol=1e-4)
    # Without moments: raw scores, each group with its own query.
    q3, g3 = calibrated_two_spaces(q_ref, q_other, ref_rows, other_rows, ref, (None, None))
    s3 = q3 @ g3.T
    np.testing.assert_allclose(s3[:, ref], ref_scores[:, ref], atol=1e-5)
    np.testing.assert_allclose(s3[:, ~ref], raw_other[:, ~ref], atol=1e-5)
    with pytest.raises(ValueError, match="same queries and rows"):
        calibrated_two_spaces(q_ref, q_other[:4], ref_rows, other_rows, ref, stats)


def test_calibrated_two_spaces_in_one_space_is_calibrated_embeddings():
    """One space, one query: the same widened embeddings, bit for bit."""
    from compat.embeddings.mixed import GroupStats, calibrated_two_spaces

    rng = np.random.default_rng(8)
    q = unit(rng.standard_normal((6, 5))).astype(np.float32)
    up = unit(rng.standard_normal((30, 5))).astype(np.float32)
    old = unit(rng.standard_normal((30, 5))).astype(np.float32)
    mask = np.arange(30) % 3 == 0
    stats = (GroupStats.of(up), GroupStats.of(old))
    mixed = np.where(mask[:, None], up, old)
    want_q, want_g = calibrated_embeddings(q, mixed, mask, stats=stats)
    got_q, got_g = calibrated_two_spaces(q, q, up, old, mask, stats)
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got_g, want_g)
