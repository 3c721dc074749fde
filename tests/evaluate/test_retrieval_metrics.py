"""Every metric against hand-computed cases: ties, queries without positives, leave-one-out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compat.evaluate import metrics as M

T, F = True, False


def _reference(scores, same, k):
    """Brute force: sort each row by (score desc, wrong before right) and walk it."""
    out = []
    for s, m in zip(scores.tolist(), same.tolist(), strict=True):
        order = sorted(range(len(s)), key=lambda j: (-s[j], m[j]))
        hits = [m[j] for j in order if s[j] != -math.inf]
        ranks = [r + 1 for r, h in enumerate(hits) if h]
        if not ranks:
            out.append((0, math.nan, math.nan))
            continue
        ap = sum((j + 1) / r for j, r in enumerate(ranks)) / len(ranks)
        apk = sum((j + 1) / r for j, r in enumerate(ranks) if r <= k) / min(len(ranks), k)
        out.append((ranks[0], ap, apk))
    return out


# --------------------------------------------------------------------- hand-computed


def test_ranks_ap_and_map_at_k_by_hand():
    # wrong 0.9, right 0.8, wrong 0.7, right 0.6 -> correct matches at ranks 2 and 4.
    scores = np.array([[0.9, 0.8, 0.7, 0.6]])
    same = np.array([[F, T, F, T]])
    st = M.rank_stats(scores, same, k=3)
    assert st.first_rank.tolist() == [2]
    assert st.ap[0] == pytest.approx((1 / 2 + 2 / 4) / 2)  # 0.5
    assert st.ap_at_k[0] == pytest.approx((1 / 2) / 2)  # only rank 2 is in the top 3
    assert M.top_k(scores, same, 1) == 0.0 and M.top_k(scores, same, 2) == 1.0
    assert M.mean_average_precision(scores, same) == pytest.approx(0.5)
    assert M.map_at_k(scores, same, 3) == pytest.approx(0.25)


def test_gldv2_map_at_k_divides_by_min_of_positives_and_k():
    # Three positives at ranks 1, 3, 5; k = 2: AP@2 = (1/1) / min(3, 2) = 0.5.
    scores = np.array([[5, 4, 3, 2, 1.0]])
    same = np.array([[T, F, T, F, T]])
    assert M.map_at_k(scores, same, 2) == pytest.approx(0.5)
    # k = 10 > P: (1/1 + 2/3 + 3/5) / 3
    assert M.map_at_k(scores, same, 10) == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)
    # Positives present but no hit within k counts as 0 (the query is not skipped).
    scores2 = np.array([[5, 4, 3, 2, 1.0], [5, 4, 3, 2, 1.0]])
    same2 = np.array([[T, F, F, F, F], [F, F, F, F, T]])
    assert M.map_at_k(scores2, same2, 2) == pytest.approx((1.0 + 0.0) / 2)


def test_ties_count_against_the_query():
    # A wrong item tied with the right one ranks first: rank 2, not 1.
    scores = np.array([[0.8, 0.8, 0.5], [0.8, 0.8, 0.1], [0.8, 0.8, 0.8]])
    same = np.array([[F, T, T], [T, T, F], [T, F, F]])
    st = M.rank_stats(scores, same)
    assert st.first_rank.tolist() == [2, 1, 3]
    assert st.ap[0] == pytest.approx((1 / 2 + 2 / 3) / 2)  # 7/12
    assert st.ap[1] == pytest.approx(1.0)  # ties among right answers cost nothing
    assert st.ap[2] == pytest.approx(1 / 3)
    # Order of the gallery does not matter.
    st_rev = M.rank_stats(scores[:, ::-1], same[:, ::-1])
    np.testing.assert_array_equal(st_rev.first_rank, st.first_rank)
    np.testing.assert_allclose(st_rev.ap, st.ap)
    # A collapsed model (all scores equal) gets nothing for free.
    flat = np.zeros((2, 4))
    flat_same = np.array([[T, F, F, F], [F, T, F, F]])
    assert M.top_k(flat, flat_same, 1) == 0.0


def test_queries_without_positives_are_skipped():
    scores = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.4]])
    same = np.array([[T, F], [T, F], [F, F]])  # third query has no positive
    st = M.rank_stats(scores, same)
    assert st.first_rank.tolist() == [1, 2, 0]
    assert np.isnan(st.ap[2]) and np.isnan(st.ap_at_k[2])
    assert M.top_k(scores, same, 1) == pytest.approx(1 / 2)  # over the 2 valid queries
    assert M.mean_average_precision(scores, same) == pytest.approx((1 + 1 / 2) / 2)
    assert M.cmc(scores, same, 3).tolist() == pytest.approx([0.5, 1.0, 1.0])
    none = np.zeros((1, 2), bool)
    assert math.isnan(M.top_k(scores[:1], none, 1))
    assert math.isnan(M.mean_average_precision(scores[:1], none))
    assert np.isnan(M.cmc(scores[:1], none, 2)).all()


def test_leave_one_out_is_by_index_not_by_label():
    # Query and gallery are the same four items; items 0, 1 share a label, 2, 3 share one.
    # Each item's own column scores 1.0 and must be removed; the other same-label item stays.
    scores = np.array(
        [
            [1.0, 0.2, 0.5, 0.1],
            [0.2, 1.0, 0.3, 0.6],
            [0.5, 0.3, 1.0, 0.4],
            [0.1, 0.6, 0.4, 1.0],
        ]
    )
    labels = np.array([0, 0, 1, 1])
    same = labels[:, None] == labels[None, :]
    ex = np.arange(4)
    st = M.rank_stats(scores, same, exclude=ex)
    # q0: others 0.5 (wrong), 0.2 (right), 0.1 -> rank 2; q1: 0.6 wrong, 0.3 wrong, 0.2 right -> 3
    # q2: 0.5 wrong, 0.4 right -> 2; q3: 0.6 wrong, 0.4 right -> 2
    assert st.first_rank.tolist() == [2, 3, 2, 2]
    assert st.n_pos.tolist() == [1, 1, 1, 1]
    assert M.top_k(scores, same, 1, exclude=ex) == 0.0
    assert M.top_k(scores, same, 1) == 1.0  # without leave-one-out every query finds itself
    # The excluded item is not counted as a candidate: top score is the best *other* item.
    assert st.top_score.tolist() == [0.5, 0.6, 0.5, 0.6]
    # -1 means "nothing to leave out" for that query.
    st2 = M.rank_stats(scores, same, exclude=np.array([-1, 1, 2, 3]))
    assert st2.first_rank.tolist() == [1, 3, 2, 2]
    with pytest.raises(ValueError, match="outside"):
        M.rank_stats(scores, same, exclude=np.array([4, 0, 0, 0]))


def test_cmc_curve_by_hand():
    fr = np.array([1, 3, 0, 2, 7])  # 0: no positive
    assert M.cmc_from_ranks(fr, 4).tolist() == pytest.approx([0.25, 0.5, 0.75, 0.75])
    assert M.top_k_from_ranks(fr, 10) == 1.0


@pytest.mark.parametrize("method", ["compare", "sort", "auto"])
def test_rank_stats_equal_brute_force_on_random_ties(method):
    rng = np.random.default_rng(0)
    for _ in range(30):
        scores = rng.integers(0, 4, (6, 25)).astype(np.float32)
        same = rng.random((6, 25)) < 0.25
        ex = rng.integers(-1, 25, 6)
        s_ex, m_ex = scores.copy(), same.copy()
        rows = np.flatnonzero(ex >= 0)
        s_ex[rows, ex[rows]] = -np.inf
        m_ex[rows, ex[rows]] = False
        ref = _reference(s_ex, m_ex, 5)
        st = M.rank_stats(scores, same, exclude=ex, k=5, method=method)
        assert st.first_rank.tolist() == [r[0] for r in ref]
        np.testing.assert_allclose(st.ap, [r[1] for r in ref])
        np.testing.assert_allclose(st.ap_at_k, [r[2] for r in ref])


def test_many_positives_take_the_sort_path():
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((3, 400))
    same = rng.random((3, 400)) < 0.5  # ~200 positives > the comparison cut-off
    auto = M.rank_stats(scores, same)
    cmp = M.rank_stats(scores, same, method="compare")
    # Exact by construction: both methods only compare the same float64 scores (>=, a sorted
    # search) and count; no arithmetic touches a score, so no kernel can change a rank.
    np.testing.assert_array_equal(auto.first_rank, cmp.first_rank)
    np.testing.assert_allclose(auto.ap, cmp.ap)


@pytest.mark.parametrize("n", [4093, 4096, 17])
def test_compare_counts_equal_a_plain_count_across_word_lanes_and_blocks(n, monkeypatch):
    """The word-lane count (eight bytes per uint64) against numpy's count: widths that are not
    a multiple of 8 (padding), rows long enough that a byte lane spans several 255-word
    blocks and holds > 255 ones in all, and blocks of rows smaller than the query count."""
    rng = np.random.default_rng(2)
    s = rng.integers(0, 50, (37, n)).astype(np.float32)  # ties on purpose
    ps = -np.sort(-rng.integers(0, 50, (37, 5)).astype(np.float32), axis=1)
    ps[3, 2:] = -np.inf  # padding slots count every score, as -inf thresholds do
    want = (s[:, None, :] >= ps[:, :, None]).sum(axis=2)
    monkeypatch.setattr(M, "_COMPARE_BYTES", 5 * n * 4)  # 4 queries per block: 10 blocks
    np.testing.assert_array_equal(M._count_at_or_above_compare(s, ps), want)
    words = np.ones((2, 3, 8 * 700), dtype=bool)  # 700 words per row: 3 lane blocks
    np.testing.assert_array_equal(M._count_true_bytes(words), np.full((2, 3), 8 * 700))


def test_metrics_do_not_modify_inputs():
    scores = np.array([[0.3, 0.2]])
    same = np.array([[T, F]])
    M.rank_stats(scores, same, exclude=np.array([0]))
    assert scores.tolist() == [[0.3, 0.2]] and same.tolist() == [[T, F]]


# ------------------------------------------------------------------ verification


def test_tar_at_far_by_hand():
    genuine = [0.9, 0.8, 0.3]
    impostor = [0.85, 0.5, 0.2, 0.1]
    s = np.array(genuine + impostor)
    y = np.array([T] * 3 + [F] * 4)
    # FAR <= 0.25 allows 1 of 4 impostors: threshold just above 0.5 -> 0.9, 0.8 accepted.
    assert M.tar_at_far(s, y, 0.25) == pytest.approx(2 / 3)
    # FAR <= 0.1 allows none: the bar is the best impostor 0.85 -> only 0.9.
    assert M.tar_at_far(s, y, 0.1) == pytest.approx(1 / 3)
    # FAR <= 0.5 allows 2: bar at 0.2 -> all genuine accepted.
    assert M.tar_at_far(s, y, 0.5) == pytest.approx(1.0)
    # Exact by construction (ROC vs order statistic): both compare the given scores only, and
    # each TAR is one correctly rounded division of the same two integer counts.
    for far in (0.1, 0.25, 0.5, 0.9, 1.0):
        assert M.tar_at_far(s, y, far) == M.tar_at_far_direct(s, y, far)


def test_tar_at_far_ties_with_an_impostor_are_rejected():
    s = np.array([0.5, 0.5, 0.1])
    y = np.array([T, F, F])
    assert M.tar_at_far(s, y, 0.49) == 0.0  # accepting 0.5 would accept half the impostors
    assert M.tar_at_far(s, y, 0.5) == 1.0


def test_tar_at_far_keeps_collinear_roc_points():
    # Genuine 0.9; tie blocks (genuine, impostor) at 0.5 and at 0.3; impostor 0.1. ROC points
    # (0, 1/3), (1/3, 2/3), (2/3, 1) are collinear: drop_intermediate would remove the middle
    # one and report 1/3 at FAR 0.34 instead of the achievable 2/3.
    s = np.array([0.9, 0.5, 0.5, 0.3, 0.3, 0.1])
    y = np.array([T, T, F, T, F, F])
    assert M.tar_at_far(s, y, 0.34) == pytest.approx(2 / 3)
    assert M.tar_at_far_direct(s, y, 0.34) == pytest.approx(2 / 3)


def test_tar_at_far_roc_and_order_statistic_agree_on_random_data():
    rng = np.random.default_rng(2)
    for n in (7, 30, 100, 1000):
        s = rng.integers(0, 12, n).astype(np.float64)
        y = rng.random(n) < 0.4
        y[0], y[1] = True, False
        for far in (0.001, 0.01, 0.1, 0.2, 0.3, 1 / 3, 0.5):
            # exact: comparisons of the same scores, then count / count (see above)
            assert M.tar_at_far(s, y, far) == M.tar_at_far_direct(s, y, far), (n, far)


def test_tar_undefined_without_both_classes():
    assert math.isnan(M.tar_at_far(np.array([0.1, 0.2]), np.array([T, T]), 0.1))
    assert math.isnan(M.tar_at_far(np.array([0.1, 0.2]), np.array([F, F]), 0.1))


# ---------------------------------------------------------------------- open set


def test_tpir_at_fpir_by_hand():
    top = np.array([0.9, 0.7, 0.8, 0.4, 0.75, 0.6, 0.3, 0.2, 0.1])
    correct = np.array([T, T, F, T, F, F, F, F, F])
    mated = np.array([T, T, T, T, F, F, F, F, F])
    # 5 non-mated probes; FPIR 0.2 lets 1 score above the bar -> bar at 0.6.
    # Mated, correct at rank 1 and above 0.6: 0.9 and 0.7 -> 2 of 4.
    assert M.tpir_at_fpir(top, correct, mated, 0.2) == pytest.approx(0.5)
    # FPIR 0.1 lets none above -> bar at 0.75 -> only 0.9.
    assert M.tpir_at_fpir(top, correct, mated, 0.1) == pytest.approx(0.25)
    # A wrong rank-1 match never counts, however high it scores (0.8 above).
    assert M.tpir_at_fpir(top, correct, mated, 0.99) == pytest.approx(0.75)
    assert math.isnan(M.tpir_at_fpir(top, correct, np.ones(9, bool), 0.1))


def test_impostor_threshold_and_max_count():
    assert M.impostor_threshold(np.array([0.3, 0.9, 0.1]), 0.34) == 0.3
    assert M.impostor_threshold(np.array([0.3]), 1.0) == -math.inf
    assert math.isnan(M.impostor_threshold(np.array([]), 0.1))
    assert M.max_count(0.1, 30) == 3 and M.max_count(0.1, 10) == 1
    assert M.max_count(0.001, 999) == 0 and M.max_count(1.0, 5) == 5
    assert M.max_count(0.1, np.array([9, 10, 19, 20])).tolist() == [0, 1, 1, 2]


def test_metric_keys():
    assert [M.tar_key(f) for f in M.FARS] == ["tar@far=0.1", "tar@far=0.01", "tar@far=0.001"]
    assert [M.tpir_key(f) for f in M.FPIRS] == ["tpir@fpir=0.1", "tpir@fpir=0.01"]
    assert M.canonical_metric("tar@far=1e-3") == "tar@far=0.001"
    assert M.canonical_metric(" tpir@fpir = 1% ") == "tpir@fpir=0.01"
    assert M.canonical_metric("top1") == "top1" and M.canonical_metric("mAP@100") == "mAP@100"
