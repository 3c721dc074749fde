"""The one formatter of compared cells (compat/evaluate/compared.py) and the one heat map
(compat/evaluate/plots.py draw_heatmap) that the evaluate reports and the run page share."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compat.compare.engine import compare, num, num_pair
from compat.evaluate.compared import ComparedMetric
from compat.evaluate.plots import HeatmapStyle, draw_heatmap


class MeanCell:
    """A metric that is the mean of per-unit values (``nan`` values: an undefined metric)."""

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
        "old": MeanCell(rng.random(40) < 0.5),
        "new": MeanCell(rng.random(40) < 0.7),
        "paragon": MeanCell(rng.random(40) < 0.9),
        "broken": MeanCell(np.full(40, math.nan)),
    }


@pytest.mark.parametrize("resamples", [0, 50])
def test_entries_are_the_engines_numbers_made_json_safe(resamples):
    comparison = compare(_cells(), resamples=resamples, seed=1, stream="s")
    f = ComparedMetric(comparison, "m")
    assert f.value("new") == comparison.value("new", "m") and type(f.value("new")) is float
    assert f.value("broken") is None and f.value("absent") is None  # null, never NaN
    terms = f.terms(["old", "new", "absent"])
    assert terms["absent"] is None and terms["new"] == f.value("new")
    assert f.difference("new", "old") == comparison.difference("new", "old", "m").to_json()
    gain = comparison.gain("new", "old", "paragon", "m")
    assert f.gain("new", "old", "paragon") == gain.to_json()
    plain = comparison.gain("new", "old", "paragon", "m", interval=False)
    assert f.gain("new", "old", "paragon", interval=False) == plain.to_json()
    if resamples == 0:  # no resamples: no intervals anywhere, not nulls
        assert f.intervals() is None and "interval" not in terms
        assert f.difference("new", "old").keys() == {"value"}
        return
    expected = {k: num_pair(comparison.interval(k, "m")) for k in comparison}
    assert f.intervals() == expected == terms["interval"]
    assert list(terms["interval"]) == ["old", "new", "paragon", "broken"]  # every cell compared
    assert f.interval("broken") == [None, None]
    assert f.difference("new", "old")["lower_bound"] == num(
        comparison.difference("new", "old", "m").lower_bound
    )


def test_one_heat_map_drawn_in_both_styles(tmp_path):
    from PIL import Image

    names = ["v1", "v2", "v3", "v3-paragon"]
    grid = {q: {g: 0.2 * i + 0.05 * j for j, g in enumerate(names) if j <= i} for i, q in
            enumerate(names)}  # fmt: skip
    grid["v1"]["v3"] = None  # a missing cell stays blank
    panels = {m: grid for m in ("top1", "top5", "top10", "mAP", "mAP@100")}
    one_row = draw_heatmap(tmp_path / "report.png", "identification", panels, names)
    wrapped = draw_heatmap(
        tmp_path / "run.png", "identification", panels, names,
        style=HeatmapStyle(per_row=3, min_side=2.4, cell_font=11.0, axis_labels=False, dpi=100),
    )  # fmt: skip
    (w1, h1), (w2, h2) = Image.open(one_row).size, Image.open(wrapped).size
    assert w1 > 3 * h1  # five panels side by side
    assert w2 <= 1000 and h2 > 0.6 * w2  # three a row, then a second row


def test_the_machine_record_names_whether_training_ran_in_bf16():
    """metrics/compat.json's environment says which CPU, torch, threads and whether the CPU has
    native bf16 (where compat trains in bf16): numbers of two such machines differ by more than
    last bits, and the README says which produced them."""
    from compat.cpu import cpu_has_fast_bf16
    from compat.evaluate.environment import machine_facts

    facts = machine_facts("cpu")
    assert facts["native_bf16"] is cpu_has_fast_bf16()
    assert {"cpu", "torch", "threads", "cpu_capability", "device"} <= set(facts)
