"""Bootstrap: seeded, paired across cells, and the weighted forms equal the plain metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compat.compare.bootstrap import (
    bootstrap,
    lower_bound,
    percentile_interval,
    resample_counts,
)
from compat.evaluate import metrics as M
from compat.evaluate.metrics import weighted_rates_above
from compat.evaluate.protocols import Identification, Verification


def test_resample_counts_rows_are_resamples():
    rng = np.random.default_rng(0)
    c = resample_counts(50, 20, rng)
    assert c.shape == (20, 50) and (c.sum(axis=1) == 50).all() and (c >= 0).all()
    again = resample_counts(50, 20, np.random.default_rng(0))
    np.testing.assert_array_equal(c, again)


def test_weighted_rates_match_direct_computation_with_ties():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 6, 40).astype(float)
    same = rng.random(40) < 0.4
    w = np.ones((1, 40))
    out = weighted_rates_above(s, same, same, ~same, w, (0.05, 0.2, 0.5))
    # Exact by construction (cumulative weights vs scikit-learn's ROC): unit weights sum to exact
    # integers in float64, the scores are only compared, and each rate is one correctly rounded
    # division of the same two counts.
    for f in (0.05, 0.2, 0.5):
        assert out[f][0] == M.tar_at_far(s, same, f)
    counts = rng.integers(0, 4, (6, 40))
    out = weighted_rates_above(s, same, same, ~same, counts, (0.1, 0.3))
    for b, row in enumerate(counts):
        idx = np.repeat(np.arange(40), row)
        for f in (0.1, 0.3):
            assert out[f][b] == pytest.approx(M.tar_at_far(s[idx], same[idx], f), nan_ok=True)
    # A resample with no impostor drawn is undefined, not 0 or 1.
    only_genuine = same.astype(float)[None, :]
    assert math.isnan(weighted_rates_above(s, same, same, ~same, only_genuine, (0.1,))[0.1][0])


def _cells():
    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(40), 2)
    centers = rng.standard_normal((40, 8))

    def emb(noise):
        x = centers[labels] + noise * rng.standard_normal((80, 8))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    q_idx, g_idx = np.arange(0, 80, 2), np.arange(1, 80, 2)
    old, new = emb(1.0), emb(0.6)
    p = Identification()
    cells = {
        ("old", "old"): p.evaluate(old[q_idx], labels[q_idx], old[g_idx], labels[g_idx]),
        ("new", "old"): p.evaluate(new[q_idx], labels[q_idx], old[g_idx], labels[g_idx]),
    }
    return cells


def test_bootstrap_is_seeded_paired_and_brackets_the_estimate():
    cells = _cells()
    a = bootstrap(cells, resamples=300, seed=5, stream="identification")
    b = bootstrap(cells, resamples=300, seed=5, stream="identification")
    c = bootstrap(cells, resamples=300, seed=6, stream="identification")
    np.testing.assert_array_equal(
        a.samples[("new", "old")]["top1"], b.samples[("new", "old")]["top1"]
    )
    assert not np.array_equal(a.samples[("old", "old")]["mAP"], c.samples[("old", "old")]["mAP"])
    assert a.samples[("old", "old")]["top1"].shape == (300,)
    for key, result in cells.items():
        lo, hi = a.interval(key, "mAP", 0.95)
        assert lo <= result.metrics["mAP"] <= hi
    # A cell minus itself is exactly 0 in every resample: the resamples are shared.
    assert (a.difference(("new", "old"), ("new", "old"), "top1") == 0).all()
    d = a.difference(("new", "old"), ("old", "old"), "mAP")
    point = cells[("new", "old")].metrics["mAP"] - cells[("old", "old")].metrics["mAP"]
    lo, hi = a.difference_interval(("new", "old"), ("old", "old"), "mAP")
    assert lo <= point <= hi
    assert a.difference_lower_bound(("new", "old"), ("old", "old"), "mAP") == lower_bound(d)
    assert sorted(a.samples[("new", "old")]) == sorted(["top1", "top5", "top10", "mAP", "mAP@100"])


def test_bootstrap_of_no_resamples_and_mismatched_units():
    cells = _cells()
    assert bootstrap(cells, resamples=0).samples == {}
    ver = Verification().from_pair_scores(np.array([0.1, 0.9]), np.array([False, True]))
    with pytest.raises(ValueError, match="number of resampling units"):
        bootstrap({"a": cells[("old", "old")], "b": ver}, resamples=10)


def test_percentile_interval_and_nan_handling():
    x = np.arange(101, dtype=float)
    assert percentile_interval(x, 0.9) == pytest.approx((5.0, 95.0))
    assert lower_bound(x, 0.95) == pytest.approx(5.0)
    assert all(math.isnan(v) for v in percentile_interval(np.array([np.nan]), 0.9))
    assert percentile_interval(np.array([np.nan, 1.0, 3.0]), 0.0) == (2.0, 2.0)
