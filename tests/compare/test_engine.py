"""The comparison engine against hand-computed cases and against the bootstrap used directly."""

from __future__ import annotations

import json
import math
import zlib

import numpy as np
import pytest

from compat.compare.bootstrap import (
    CellResult,
    bootstrap,
    lower_bound,
    percentile_interval,
    resample_counts,
)
from compat.compare.engine import GainEstimate, compare, num, num_pair
from compat.compare.matrix import gain_samples, update_gain


class MeanCell:
    """A metric that is the mean of per-unit values: easy to resample by hand."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.float64)
        self.metrics = {"m": float(self.values.mean())}

    @property
    def units(self) -> int:
        return self.values.shape[0]

    def resample(self, weights):
        w = np.asarray(weights, dtype=np.float64)
        return {"m": (w @ self.values) / w.sum(axis=1)}


def _cells():
    rng = np.random.default_rng(0)
    return {
        ("old", "old"): MeanCell(rng.random(30) < 0.5),
        ("new", "old"): MeanCell(rng.random(30) < 0.6),
        ("new*", "new*"): MeanCell(rng.random(30) < 0.8),
    }


def test_cells_satisfy_the_protocol():
    assert isinstance(MeanCell([1.0]), CellResult)


def test_num_is_json_safe():
    assert num(None) is None and num(math.nan) is None
    assert num(math.inf) is None and num(-math.inf) is None
    assert num(np.float64(0.25)) == 0.25 and type(num(np.float64(0.25))) is float
    assert num(1) == 1.0
    assert num_pair((math.nan, 0.5)) == [None, 0.5] and num_pair(None) is None


def test_values_differences_and_gain_by_hand():
    cells = {"a": MeanCell([0, 1, 1, 0]), "b": MeanCell([0, 1, 0, 0]), "p": MeanCell([1, 1, 1, 0])}
    c = compare(cells, resamples=0)
    assert not c.resampled and c.interval("a", "m") is None
    assert c.value("a", "m") == 0.5
    d = c.difference("a", "b", "m")
    assert d.value == 0.25 and d.interval is None and d.lower_bound is None
    assert d.to_json() == {"value": 0.25}
    g = c.gain("a", "b", "p", "m")  # (0.5 - 0.25) / (0.75 - 0.25), BCT Eq. 9
    assert g.gain.value == pytest.approx(0.5) and g.gain.meaningful and g.interval is None
    assert list(g.to_json()) == ["value", "meaningful", "reason"]
    # The paragon no better than the old self test: no gain.
    flat = compare({"a": cells["a"], "b": cells["b"], "p": cells["b"]}, resamples=0)
    assert flat.gain("a", "b", "p", "m").gain.value is None


def test_engine_equals_the_bootstrap_done_by_hand():
    cells = _cells()
    c = compare(cells, resamples=200, seed=3, stream="identification", confidence=0.9)
    # The resamples: rows of multiplicities from the stream (seed, crc32(stream)).
    rng = np.random.default_rng([3, zlib.crc32(b"identification")])
    w = resample_counts(30, 200, rng).astype(np.float64)
    by_hand = {k: (w @ cell.values) / w.sum(axis=1) for k, cell in cells.items()}
    for k in cells:
        np.testing.assert_array_equal(c.samples(k, "m"), by_hand[k])
        assert c.interval(k, "m") == percentile_interval(by_hand[k], 0.9)
        assert c.interval(k, "m", 0.95) == percentile_interval(by_hand[k], 0.95)
    cross, old, best = ("new", "old"), ("old", "old"), ("new*", "new*")
    d = c.difference(cross, old, "m")
    paired = by_hand[cross] - by_hand[old]
    assert d.value == cells[cross].metrics["m"] - cells[old].metrics["m"]
    assert d.interval == percentile_interval(paired, 0.9)
    assert d.lower_bound == lower_bound(paired, 0.9)
    assert c.difference(cross, old, "m", 0.99).lower_bound == lower_bound(paired, 0.99)
    g = c.gain(cross, old, best, "m")
    assert g.gain == update_gain(*(cells[k].metrics["m"] for k in (cross, old, best)))
    expected = percentile_interval(gain_samples(by_hand[cross], by_hand[old], by_hand[best]), 0.9)
    assert g.interval == expected
    assert list(g.to_json()) == ["value", "meaningful", "reason", "interval"]
    assert c.gain(cross, old, best, "m", interval=False).interval is None


def test_engine_equals_the_bootstrap_object_on_protocol_results():
    """The old code paths called bootstrap() and its methods directly; the engine must agree."""
    from compat.evaluate.protocols import Identification

    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(40), 2)
    centers = rng.standard_normal((40, 8))

    def emb(noise):
        x = centers[labels] + noise * rng.standard_normal((80, 8))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    q, g = np.arange(0, 80, 2), np.arange(1, 80, 2)
    old, new = emb(1.0), emb(0.6)
    p = Identification()
    cells = {
        ("old", "old"): p.evaluate(old[q], labels[q], old[g], labels[g]),
        ("new", "old"): p.evaluate(new[q], labels[q], old[g], labels[g]),
    }
    boot = bootstrap(cells, resamples=150, seed=1, stream="identification")
    c = compare(cells, resamples=150, seed=1, stream="identification")
    cross, old = ("new", "old"), ("old", "old")
    for metric in ("top1", "mAP", "mAP@100"):
        assert c.interval(cross, metric) == boot.interval(cross, metric, 0.95)
        d = c.difference(cross, old, metric)
        assert d.interval == boot.difference_interval(cross, old, metric)
        assert d.lower_bound == boot.difference_lower_bound(cross, old, metric)


def test_difference_json_with_resamples_and_undefined_values():
    cells = {"a": MeanCell([1, 1]), "b": MeanCell([1, 1])}
    c = compare(cells, resamples=20, seed=0)
    out = c.difference("a", "b", "m").to_json()
    assert out == {"value": 0.0, "interval": [0.0, 0.0], "lower_bound": 0.0}
    gain = GainEstimate(update_gain(math.nan, 0.1, 0.2), (math.nan, math.nan))
    assert json.dumps(gain.to_json()) == (
        '{"value": null, "meaningful": false, "reason": "undefined input", '
        '"interval": [null, null]}'
    )


def test_empty_comparison_has_no_samples():
    c = compare({}, resamples=10)
    assert c.boot.samples == {} and list(c) == []
