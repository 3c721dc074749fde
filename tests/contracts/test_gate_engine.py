"""The gate is a formatter over the comparison engine: its numbers equal the engine's on the
same cells, its protocols cover every metric the contract asks for, and its intervals use the
contract's confidence."""

from __future__ import annotations

import numpy as np
import pytest

from compat.compare.engine import compare
from compat.contracts.gate import judge
from compat.contracts.schema import Contract
from compat.errors import BadInputError
from compat.evaluate.manifest import evaluate_manifest, label_codes
from compat.evaluate.protocols import PROTOCOLS

from .test_forward_criterion import _setup


def _contract(criteria, transitive=("v0",)):
    return Contract(
        version="v2", parent="v1", embedding_dim=16, head="cosface",
        transitive=list(transitive), criteria=criteria,
    )  # fmt: skip


def test_contract_metrics_beyond_the_defaults_are_measured():
    manifest, emb, _, _ = _setup()
    c = _contract(
        [
            {"protocol": "verification", "metric": "tar@far=1e-4"},
            {"protocol": "identification", "metric": "top20"},
            {"protocol": "identification", "metric": "mAP@50"},
        ]
    )
    v = judge(c, manifest, emb, resamples=20)
    assert {"tar@far=0.0001", "tar@far=0.001"} <= set(v.matrix["verification"])
    assert {"top1", "top20", "mAP@50"} <= set(v.matrix["identification"])
    assert "mAP@100" not in v.matrix["identification"]  # one cutoff: the one asked for
    # gallery by gallery (the parent, then the transitive one), each in the contract's order
    assert [r.metric for r in v.results] == ["tar@far=0.0001", "top20", "mAP@50"] * 2


def test_verdict_equals_the_engine_and_uses_the_contract_confidence():
    manifest, emb, _, _ = _setup()
    crit = [
        {"protocol": "identification", "metric": "top1", "confidence": 0.9, "margin": -0.1},
        {"protocol": "identification", "metric": "mAP"},
        {"protocol": "verification", "metric": "tar@far=0.1", "confidence": 0.8},
    ]
    v = judge(_contract(crit), manifest, emb, resamples=300, seed=4)
    # The same cells, in the order the gate evaluates them, through the engine by hand.
    cells = [("v2", "v1"), ("v1", "v1"), ("v2", "v0"), ("v0", "v0")]
    protocols = [PROTOCOLS.create("identification"), PROTOCOLS.create("verification")]
    codes = label_codes(manifest.labels)
    res = {
        c: evaluate_manifest(manifest, emb[c[0]], emb[c[1]], protocols, codes=codes) for c in cells
    }
    comp = {
        p.name: compare(
            {c: r[p.name] for c, r in res.items()}, resamples=300, seed=4, stream=p.name
        )
        for p in protocols
    }
    ident, ver = comp["identification"], comp["verification"]
    assert v.intervals["identification"]["top1"]["v2"]["v1"] == list(
        ident.interval(("v2", "v1"), "top1", 0.9)
    )
    assert v.intervals["identification"]["mAP"]["v2"]["v1"] == list(
        ident.interval(("v2", "v1"), "mAP", 0.95)  # no criterion bounds mAP: the default
    )
    assert v.intervals["verification"]["tar@far=0.1"]["v0"]["v0"] == list(
        ver.interval(("v0", "v0"), "tar@far=0.1", 0.8)
    )
    for r in v.results:
        d = comp[r.protocol].difference(tuple(r.lhs), tuple(r.rhs), r.metric, r.confidence)
        assert r.difference == d.value
        assert r.lower_bound == (d.lower_bound if r.confidence else None)
        expected = d.value > r.margin and (r.confidence is None or d.lower_bound > r.margin)
        assert r.passed == expected


def test_gain_against_the_paragon_is_the_engine_gain():
    manifest, emb, _, _ = _setup()
    emb = {**emb, "v2p": emb["v2"]}
    v = judge(
        _contract([{"protocol": "identification", "metric": "top1"}], transitive=()),
        manifest, emb, paragon="v2p", resamples=0,
    )  # fmt: skip
    m = v.matrix["identification"]["top1"]
    expected = (m["v2"]["v1"] - m["v1"]["v1"]) / (m["v2p"]["v2p"] - m["v1"]["v1"])  # Eq. (9)
    assert v.gain["identification"]["top1"]["value"] == pytest.approx(expected)
    assert list(v.gain["identification"]["top1"]) == ["paragon", "value", "meaningful", "reason"]
    assert v.intervals == {}


def test_criteria_a_protocol_cannot_compute_together_are_bad_input():
    manifest, emb, _, _ = _setup()
    c = _contract(
        [
            {"protocol": "identification", "metric": "mAP@50"},
            {"protocol": "identification", "metric": "mAP@100"},
        ]
    )
    with pytest.raises(BadInputError, match="mAP@k for one k"):
        judge(c, manifest, emb, resamples=0)
    assert np.isfinite(emb["v1"]).all()
