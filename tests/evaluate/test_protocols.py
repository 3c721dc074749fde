"""Protocol objects: equal to the pure metrics, shared ranking, pairs, manifests, resampling."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from compat.errors import UsageError
from compat.evaluate import metrics as M
from compat.evaluate.manifest import evaluate_manifest
from compat.evaluate.pairs import label_pairs
from compat.evaluate.protocols import (
    PROTOCOLS,
    Identification,
    OpenSet,
    Verification,
    create_protocols,
    evaluate_sets,
)


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _rank_margin(scores, same, exclude=None):
    """Smallest |positive score - other score| in a query's row (its own item left out). Ranks
    only change when a positive and another item swap, so ranks computed from two float32 score
    paths agree exactly when this margin is far above their rounding."""
    s = np.asarray(scores, dtype=np.float64).copy()
    if exclude is not None:
        rows = np.flatnonzero(exclude >= 0)
        s[rows, exclude[rows]] = np.nan
    margin = np.inf
    for row, pos in zip(s, same, strict=True):
        p, other = row[pos & ~np.isnan(row)], row[~pos & ~np.isnan(row)]
        if p.size and other.size:
            margin = min(margin, float(np.abs(p[:, None] - other[None, :]).min()))
    return margin


@pytest.fixture
def sets():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((12, 8))
    ql = np.repeat(np.arange(12), 3)  # classes 10, 11 have no gallery item: non-mated
    gl = np.repeat(np.arange(10), 2)
    q = _unit(centers[ql] + 0.8 * rng.standard_normal((ql.size, 8)))
    g = _unit(centers[gl] + 0.8 * rng.standard_normal((gl.size, 8)))
    return q, ql, g, gl


def test_catalog_names_and_unknown_protocol():
    assert PROTOCOLS.names() == ["identification", "open-set", "verification"]
    with pytest.raises(UsageError, match="unknown protocol 'ranking'; known: identification"):
        create_protocols(["ranking"])
    ident, ver = create_protocols(["identification", "verification"], ks=(1, 3), fars=(0.5,))
    assert ident.metric_names() == ["top1", "top3", "mAP", "mAP@100"]
    assert ver.metric_names() == ["tar@far=0.5"]


def test_default_metric_names_are_the_reference_keys():
    names = [m for p in create_protocols(PROTOCOLS.names()) for m in p.metric_names()]
    assert names == [
        "top1", "top5", "top10", "mAP", "mAP@100",
        "tpir@fpir=0.1", "tpir@fpir=0.01",
        "tar@far=0.1", "tar@far=0.01", "tar@far=0.001",
    ]  # fmt: skip


def test_identification_and_open_set_equal_the_pure_metrics(sets):
    q, ql, g, gl = sets
    scores = q @ g.T
    same = ql[:, None] == gl[None, :]
    # The protocols score with torch in chunks, the reference with numpy: other float paths,
    # whose scores may differ in the last bits on another CPU kernel. The metrics below depend
    # only on orders (a positive against another item in a row; one query's top score against
    # another's, for the open-set threshold), and every such gap is far above float32 rounding
    # (~6e-8 on unit 8-dim rows), so both paths give the same metrics on any processor.
    assert _rank_margin(scores, same) > 1e-4
    assert np.diff(np.sort(scores.max(axis=1).astype(np.float64))).min() > 1e-4
    res = evaluate_sets([Identification(), OpenSet()], q, ql, g, gl, chunk_size=5, device="cpu")
    ident = res["identification"].metrics
    assert ident["top1"] == pytest.approx(M.top_k(scores, same, 1))
    assert ident["top5"] == pytest.approx(M.top_k(scores, same, 5))
    assert ident["mAP"] == pytest.approx(M.mean_average_precision(scores, same))
    assert ident["mAP@100"] == pytest.approx(M.map_at_k(scores, same, 100))
    assert res["identification"].counts == {"queries": 36, "valid_queries": 30}
    assert res["identification"].curves["cmc"][0] == pytest.approx(ident["top1"])
    mated = same.any(axis=1)
    correct = M.rank_stats(scores, same).first_rank == 1
    for f in (0.1, 0.01):
        expected = M.tpir_at_fpir(scores.max(axis=1), correct, mated, f)
        assert res["open-set"].metrics[M.tpir_key(f)] == pytest.approx(expected)
    assert res["open-set"].counts == {"mated": 30, "non_mated": 6}
    # Chunking does not change anything. Chunks of 5 and of 36 query rows are other BLAS
    # products (scores differ by an ulp, ~6e-8 on unit 8-dim rows), but the metrics are
    # functions of the ranks alone, and no positive is within 1e-4 of another item's score
    # (1e-3 here; asserted above), so the ranks and with them the metrics are the same bits.
    again = evaluate_sets([Identification()], q, ql, g, gl, chunk_size=1000, device="cpu")
    assert again["identification"].metrics == ident


def test_verification_uses_all_pairs_when_few(sets):
    q, ql, g, gl = sets
    res = Verification().evaluate(q, ql, g, gl, device="cpu")
    scores = (q @ g.T).ravel()
    same = (ql[:, None] == gl[None, :]).ravel()
    # Verification sums element-wise products per pair, the reference is a BLAS product: the
    # scores may differ in the last bits. TAR counts the genuine scores above an impostor
    # threshold, so it is the same on both paths while no genuine score lies within float32
    # rounding of an impostor's (the nearest are 7.7e-5 apart here).
    gap = np.abs(scores[same][:, None].astype(np.float64) - scores[~same][None, :]).min()
    assert gap > 1e-5
    for f in M.FARS:
        assert res.metrics[M.tar_key(f)] == pytest.approx(M.tar_at_far(scores, same, f))
    assert res.counts == {"genuine_pairs": int(same.sum()), "impostor_pairs": int((~same).sum())}


def test_label_pairs_all_when_small_excluding_self():
    ql = np.array([0, 1, 1])
    gl = np.array([0, 1, 1])
    qi, gi, same = label_pairs(ql, gl, exclude=np.arange(3), max_pairs=100)
    assert list(zip(qi.tolist(), gi.tolist(), strict=True)) == [
        (0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)
    ]  # fmt: skip
    assert same.tolist() == [False, False, False, True, False, True]


def test_label_pairs_sampled_balanced_seeded_and_unique():
    rng = np.random.default_rng(1)
    ql = rng.integers(0, 30, 400)
    gl = rng.integers(0, 30, 500)
    ex = np.where(rng.random(400) < 0.5, rng.integers(0, 500, 400), -1)
    qi, gi, same = label_pairs(ql, gl, exclude=ex, max_pairs=10_000, seed=3)
    n_genuine_total = int((ql[:, None] == gl[None, :]).sum())
    assert n_genuine_total > 5000  # so genuine pairs are sampled down to half
    assert same.sum() <= 5000 and same.sum() >= 4990  # minus the few excluded self pairs
    assert qi.size <= 10_000 and qi.size >= 9990
    assert np.array_equal(same, ql[qi] == gl[gi])
    assert len(set(zip(qi.tolist(), gi.tolist(), strict=True))) == qi.size  # no duplicates
    assert not (gi == ex[qi]).any()  # no self pair
    again = label_pairs(ql, gl, exclude=ex, max_pairs=10_000, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip((qi, gi, same), again, strict=True))
    other = label_pairs(ql, gl, exclude=ex, max_pairs=10_000, seed=4)
    assert not np.array_equal(qi, other[0]) or not np.array_equal(gi, other[1])


def test_label_pairs_keeps_all_genuine_pairs_when_they_fit():
    ql = np.arange(100) % 50
    gl = np.arange(200) % 50
    qi, _gi, same = label_pairs(ql, gl, max_pairs=1000, seed=0)
    assert same.sum() == (ql[:, None] == gl[None, :]).sum() == 400
    assert qi.size == 1000


def _manifest():
    labels = ["a", "a", "b", "b", "c", "c", "d"]
    return SimpleNamespace(
        items=[f"i{k}" for k in range(7)],
        labels=labels,
        query=[0, 2, 4, 6],
        gallery=[1, 3, 5],
        pairs=[(0, 1, True), (2, 3, True), (0, 2, False), (4, 6, False), (1, 5, False)],
    )


def test_manifest_cell_uses_query_version_for_queries_and_first_pair_items():
    man = _manifest()
    rng = np.random.default_rng(2)
    emb_q = _unit(rng.standard_normal((7, 4)))
    emb_g = _unit(rng.standard_normal((7, 4)))
    res = evaluate_manifest(man, emb_q, emb_g, create_protocols(PROTOCOLS.names()), device="cpu")
    codes = np.array([0, 0, 1, 1, 2, 2, 3])
    q, g = np.array(man.query), np.array(man.gallery)
    scores = emb_q[q] @ emb_g[g].T
    same = codes[q][:, None] == codes[g][None, :]
    assert _rank_margin(scores, same) > 1e-4  # torch and numpy scores: the ranks agree anyway
    assert res["identification"].metrics["top1"] == pytest.approx(M.top_k(scores, same, 1))
    assert res["open-set"].counts == {"mated": 3, "non_mated": 1}  # "d" has no gallery item
    pairs = np.array(man.pairs, dtype=np.int64)
    expected = (emb_q[pairs[:, 0]] * emb_g[pairs[:, 1]]).sum(1)  # first by q, second by g
    np.testing.assert_allclose(res["verification"].scores, expected, atol=1e-6)
    assert res["verification"].same.tolist() == [True, True, False, False, False]
    assert list(res) == ["identification", "open-set", "verification"]


def test_manifest_item_in_query_and_gallery_is_left_out_of_its_own_ranking():
    man = _manifest()
    man.gallery = [0, 1, 3, 5]  # item 0 is also a query
    emb = _unit(np.random.default_rng(3).standard_normal((7, 4)))
    res = evaluate_manifest(man, emb, emb, [Identification()], device="cpu")
    st = res["identification"].stats
    assert st.n_pos[0] == 1  # item 1 only; item 0 itself is not a positive
    with pytest.raises(ValueError, match="rows for 7 manifest items"):
        evaluate_manifest(man, emb[:3], emb, [Identification()])


def _replicate_check(result, protocol_metrics):
    """Resampling with integer weights equals the metric on the explicitly replicated units."""
    n = result.units
    ones = result.resample(np.ones((1, n)))
    for key, value in protocol_metrics.items():
        assert ones[key][0] == pytest.approx(value, nan_ok=True), key
    rng = np.random.default_rng(4)
    return rng.integers(0, 3, (5, n))


def test_resample_equals_replicated_units(sets):
    q, ql, g, gl = sets
    res = evaluate_sets(create_protocols(PROTOCOLS.names()), q, ql, g, gl, device="cpu")

    ident = res["identification"]
    w = _replicate_check(ident, ident.metrics)
    st = ident.stats
    for row, values in zip(w, ident.resample(w)["mAP"], strict=True):
        idx = np.repeat(np.arange(len(st)), row)
        assert values == pytest.approx(np.nanmean(st.ap[idx]), nan_ok=True)

    op = res["open-set"]
    w = _replicate_check(op, op.metrics)
    out = op.resample(w)
    for b, row in enumerate(w):
        idx = np.repeat(np.arange(op.units), row)
        exp = M.tpir_at_fpir(op.top_score[idx], op.correct[idx], op.mated[idx], 0.1)
        assert out["tpir@fpir=0.1"][b] == pytest.approx(exp, nan_ok=True)

    ver = res["verification"]
    w = _replicate_check(ver, ver.metrics)
    out = ver.resample(w)
    for b, row in enumerate(w):
        idx = np.repeat(np.arange(ver.units), row)
        for f in M.FARS:
            exp = M.tar_at_far(ver.scores[idx], ver.same[idx], f)
            assert out[M.tar_key(f)][b] == pytest.approx(exp, nan_ok=True)


def test_label_lookup_ranking_equals_the_boolean_matrix_form(sets):
    from compat.evaluate.ranking import ranking

    q, ql, g, gl = sets
    rng = np.random.default_rng(5)
    ex = np.where(rng.random(ql.size) < 0.5, rng.integers(0, gl.size, ql.size), -1)
    got = ranking(q, ql, g, gl, exclude=ex, chunk_size=7, device="cpu")
    ref = M.rank_stats(q @ g.T, ql[:, None] == gl[None, :], exclude=ex)
    # Chunks of 7 rows vs one product: scores an ulp apart; integer ranks agree exactly because
    # no positive is within 1e-4 of another score (1e-3 here), far above that rounding.
    assert _rank_margin(q @ g.T, ql[:, None] == gl[None, :], ex) > 1e-4
    np.testing.assert_array_equal(got.first_rank, ref.first_rank)
    np.testing.assert_array_equal(got.n_pos, ref.n_pos)
    np.testing.assert_allclose(got.ap, ref.ap, atol=1e-12)
    np.testing.assert_allclose(got.top_score, ref.top_score, atol=1e-6)
    with pytest.raises(ValueError, match="ascending row"):
        M.rank_stats_from_positives(q @ g.T, np.array([1, 0]), np.array([0, 0]))


def test_options_for_make_a_protocol_report_the_metrics_asked_for():
    from compat.evaluate.config import PROTOCOL_NAMES
    from compat.evaluate.protocols import PROTOCOLS, options_for, protocol_names

    assert PROTOCOL_NAMES == tuple(protocol_names()) == tuple(PROTOCOLS.names())
    asked = {
        "identification": ["top20", "mAP@50", "mAP", "top1"],
        "open-set": ["tpir@fpir=0.001"],
        "verification": ["tar@far=0.0001", "tar@far=0.1"],
    }
    for name, metrics in asked.items():
        built = PROTOCOLS.create(name, **options_for(name, metrics))
        assert set(metrics) <= set(built.metric_names())
    # The defaults are kept, in their order, when nothing beyond them is asked for.
    for name in protocol_names():
        assert PROTOCOLS.create(name, **options_for(name, [])).metric_names() == (
            PROTOCOLS.create(name).metric_names()
        )
    with pytest.raises(ValueError, match="unknown metric 'top1' for open-set"):
        options_for("open-set", ["top1"])
