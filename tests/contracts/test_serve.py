"""Served configurations (issue 27): a contract says how the version meets its parent's gallery,
and the gate checks the criterion on exactly that configuration.

``native``: M(new, parent). ``query-adapter``: M(adapt(new), parent), the new queries mapped into
the parent's space first. ``backfill``: M(new, psi(parent)), the parent's rows mapped by psi.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import ValidationError

from compat.contracts.gate import judge, required_cells
from compat.contracts.schema import Contract
from compat.errors import BadInputError


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _setup(n_classes=40, per=6, d_old=12, d_new=20, seed=0):
    """v1 (12-dim) and an independent v3 (20-dim) whose space is a random map of v1's: raw, v3
    cannot search v1's gallery at all; the map's inverse, applied to v3's rows, can."""
    rng = np.random.default_rng(seed)
    labels = [f"c{c:02d}" for c in range(n_classes) for _ in range(per)]
    n = len(labels)
    manifest = SimpleNamespace(
        items=[f"i{k}" for k in range(n)], labels=labels,
        query=[i for i in range(n) if i % per < per // 2],
        gallery=[i for i in range(n) if i % per >= per // 2],
        pairs=[(c * per, c * per + 1, True) for c in range(n_classes)]
        + [(c * per, (c + 1) * per, False) for c in range(n_classes - 1)],
    )  # fmt: skip
    centres = rng.standard_normal((n_classes, d_old))[np.repeat(np.arange(n_classes), per)]
    v1 = _unit(centres + 1.2 * rng.standard_normal((n, d_old)))
    q, _ = np.linalg.qr(rng.standard_normal((d_new, d_new)))
    lift = q[:, :d_old]  # (d_new, d_old), orthonormal columns
    # v3 is stronger (less noise) and lives in a rotated, wider space
    v3_old_space = _unit(centres + 0.4 * rng.standard_normal((n, d_old)))
    v3 = _unit(v3_old_space @ lift.T + 0.05 * rng.standard_normal((n, d_new)))
    adapted = _unit(v3 @ lift)  # the map new -> old that a Procrustes fit would find
    useless = _unit(rng.standard_normal((n, d_old)))
    return manifest, {"v1": v1, "v3": v3}, adapted, useless


def _contract(serve="query-adapter", **kw):
    return Contract(
        version="v3", parent="v1", embedding_dim=20, head="cosface", serve=serve,
        criteria=[{"protocol": "identification", "metric": "top1", "confidence": 0.95}], **kw,
    )  # fmt: skip


def test_the_shorthand_and_the_defaults_of_serve():
    assert Contract(version="v1", embedding_dim=8, head="cosface").serve.mode == "native"
    c = _contract()
    assert c.serve.mode == "query-adapter" and c.serve.map_folder("v3", "v1") == "maps/v3-to-v1"
    b = _contract({"mode": "backfill"})
    assert b.serve.map_folder("v3", "v1", "models") == "models/v3/upgrade"
    assert _contract({"mode": "query-adapter", "map": "m/x"}).serve.map_folder("v3", "v1") == "m/x"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"serve": "adapter"}, "native"),
        ({"transitive": ["v0"]}, "serves the parent's gallery only"),
        ({"serve": {"mode": "backfill", "mapp": "x"}}, "Extra inputs"),
    ],
)
def test_contracts_that_cannot_be_served_so_are_refused(kw, message):
    with pytest.raises(ValidationError, match=message):
        _contract(**{"serve": "query-adapter", **kw})
    with pytest.raises(ValidationError, match="needs a parent"):
        Contract(version="v1", embedding_dim=8, head="cosface", serve="backfill")


def test_required_cells_follow_the_served_configuration():
    assert ("adapt(v3)", "v1") in required_cells(_contract(), None)
    assert ("v3", "v1") not in required_cells(_contract(), None)
    assert ("v3", "psi(v1)") in required_cells(_contract("backfill"), None)
    assert ("v3", "v1") in required_cells(_contract("native", dim_mismatch="truncate"), None)


def test_an_adapted_incompatible_model_passes_where_raw_it_fails():
    manifest, emb, adapted, useless = _setup()
    native = judge(_contract("native", dim_mismatch="truncate"), manifest, emb, resamples=200)
    assert not native.passed  # raw v3 cannot search v1's rows

    verdict = judge(_contract(), manifest, emb, resamples=200, adapted=adapted)
    assert verdict.passed, [r.description for r in verdict.failed()]
    [r] = verdict.results
    assert r.lhs == ["adapt(v3)", "v1"] and r.rhs == ["v1", "v1"]
    assert r.description == ("identification top1: M(adapt(v3), v1) > M(v1, v1) at 95% confidence")
    top1 = verdict.matrix["identification"]["top1"]
    assert r.lhs_value == top1["adapt(v3)"]["v1"] > top1["v1"]["v1"]
    assert verdict.serve == {"mode": "query-adapter"}

    bad = judge(_contract(), manifest, emb, resamples=200, adapted=useless)
    assert not bad.passed


def test_backfill_serving_checks_the_upgraded_gallery():
    manifest, emb, _, _ = _setup()
    # an ideal psi(v1): each stored v1 row lands next to what v3 makes of the same item
    rng = np.random.default_rng(1)
    lifted = _unit(emb["v3"] + 0.05 * rng.standard_normal(emb["v3"].shape))
    verdict = judge(_contract("backfill"), manifest, emb, resamples=200, upgraded={"v1": lifted})
    [r] = verdict.results
    assert r.lhs == ["v3", "psi(v1)"] and verdict.passed
    with pytest.raises(BadInputError, match="serves by backfill"):
        judge(_contract("backfill"), manifest, emb, resamples=0)


def test_a_query_adapter_contract_without_adapted_rows_or_of_the_wrong_shape_is_an_error():
    manifest, emb, adapted, _ = _setup()
    with pytest.raises(BadInputError, match="no adapted query rows"):
        judge(_contract(), manifest, emb, resamples=0)
    with pytest.raises(BadInputError, match=r"adapt\(v3\): shape"):
        judge(_contract(), manifest, emb, resamples=0, adapted=adapted[:, :5])


def test_the_gain_of_an_adapted_version_uses_the_served_cell():
    manifest, emb, adapted, _ = _setup()
    emb = {**emb, "v3-paragon": emb["v3"]}
    verdict = judge(
        _contract(), manifest, emb, resamples=100, adapted=adapted, paragon="v3-paragon"
    )
    top1 = verdict.matrix["identification"]["top1"]
    old, served, para = top1["v1"]["v1"], top1["adapt(v3)"]["v1"], top1["v3-paragon"]["v3-paragon"]
    gain = verdict.gain["identification"]["top1"]
    assert gain["value"] == pytest.approx((served - old) / (para - old))
