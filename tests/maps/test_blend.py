"""Query blends (issue 42 item 1): slerp between the old model's query and the adapted new one,
its weight selected on held-out classes, the blend refused as every map; and one verdict
(item 3): a map checked on a held-out set as the gate judges, that check deciding."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from compat.errors import BadInputError
from compat.maps import fit_map, load_map, save_map
from compat.maps.adapt_config import AdaptConfig
from compat.maps.blend import select_weight, slerp, weight_grid
from compat.maps.config import BlendParams, CheckConfig
from compat.maps.verdict import CheckSet, check_on_set
from tests.maps.conftest import drifted_pairs, unit


@pytest.fixture(scope="module")
def hard():
    """A pair where the adapter alone loses to keeping the old model, and a blend of the two
    beats it: both models see the classes through independent noise (3,000 pairs, 150
    classes)."""
    return drifted_pairs(n=3000, classes=150, old_noise=2.5, new_noise=2.0)


def _reference_slerp(u: np.ndarray, v: np.ndarray, w: float) -> np.ndarray:
    """Eq. 1 one row at a time, in plain Python floats: the slow reference."""
    out = []
    for a, b in zip(u.astype(float), v.astype(float), strict=True):
        a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
        t = float(np.arccos(np.clip(a @ b, -1.0, 1.0)))
        q = (1 - w) * a + w * b if t < 1e-6 else (
            (np.sin((1 - w) * t) * a + np.sin(w * t) * b) / np.sin(t))  # fmt: skip
        out.append(q / np.linalg.norm(q))
    return np.asarray(out)


def test_slerp_is_eq1_row_by_row_with_its_ends_and_its_parallel_limit():
    rng = np.random.default_rng(0)
    u, v = rng.standard_normal((50, 8)), 3.0 * rng.standard_normal((50, 8))
    v[7] = 2 * u[7]  # parallel rows: the linear limit
    for w in (0.0, 0.3, 1.0):
        got = slerp(u, v, w)
        assert got.dtype == np.float32 and got.shape == (50, 8)
        np.testing.assert_allclose(got, _reference_slerp(u, v, w), atol=1e-6)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(slerp(u, v, 0.0), unit(u), atol=1e-6)
    np.testing.assert_allclose(slerp(u, v, 1.0), unit(v), atol=1e-6)
    # a row's bits do not depend on its batch
    assert np.array_equal(slerp(u, v, 0.4)[13:14], slerp(u[13:14], v[13:14], 0.4))
    with pytest.raises(ValueError, match="differ"):
        slerp(u, v[:, :4], 0.5)


def test_the_weight_is_the_best_held_out_top1_ties_to_the_old_model():
    assert weight_grid(11)[:3] == [0.0, 0.1, 0.2] and weight_grid(2) == [0.0, 1.0]
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(40), 4)
    centers = rng.standard_normal((40, 16))
    old = unit(centers[labels] + 1.2 * rng.standard_normal((160, 16)))
    same = select_weight(old, old, labels.tolist(), BlendParams())
    assert same.weight == 0.0  # every weight scores alike: the one nearest the old model
    assert len(same.scores) == 11 and same.selected_on == 160
    fixed = select_weight(old, old, labels.tolist(), BlendParams(weight=0.35))
    assert fixed.weight == 0.35 and list(fixed.scores) == ["0.35"]
    better = unit(centers[labels] + 0.3 * rng.standard_normal((160, 16)))
    assert select_weight(old, better, labels.tolist(), BlendParams()).weight > 0.5


def test_a_blend_is_kept_where_the_adapter_alone_is_refused(hard, tmp_path):
    new, old, labels, _ = hard
    adapter = fit_map("procrustes", new, old, labels=labels.tolist())
    blend = fit_map("procrustes", new, old, labels=labels.tolist(), role="query-blend",
                    blend={}, from_name="v3", to_name="v1")  # fmt: skip
    assert adapter.refused is not None  # the adapter alone loses to keeping the old model
    b, h = blend.card.blend, blend.card.heldout
    assert blend.refused is None and h.lower_bound > 0 and h.mapped > h.old_self
    assert blend.card.role == "query-blend" and 0 < b.weight < 1 and b.method == "slerp"
    # without a check set, half the held-out classes select the weight, the other half check
    assert b.selected_on + h.num_heldout == adapter.card.heldout.num_heldout
    assert blend.card.params["blend"]["grid"] == 11
    assert blend.provenance("x")["blend_weight"] == b.weight
    # served: slerp(old, adapt(new), w); the saved map serves the same rows
    q = blend.queries(new[:20], old[:20])
    np.testing.assert_allclose(q, slerp(old[:20], blend.apply(new[:20]), b.weight), atol=0)
    save_map(tmp_path / "b", blend)
    again = load_map(tmp_path / "b")
    assert again.card.blend == b and np.array_equal(again.queries(new[:20], old[:20]), q)
    with pytest.raises(BadInputError, match="needs the old model's rows"):
        blend.queries(new[:20])
    assert np.array_equal(adapter.queries(new[:5]), adapter.apply(new[:5]))


def test_a_blend_needs_its_role_and_a_card_keeps_them_together(hard):
    new, old, labels, _ = hard
    with pytest.raises(BadInputError, match="only a query-blend map has one"):
        fit_map("procrustes", new, old, labels=labels.tolist(), blend={})
    m = fit_map("affine", new[:600], old[:600], labels=labels[:600].tolist(), role="query-blend")
    assert m.card.blend is not None  # default parameters
    data = m.card.to_json()
    data.pop("blend")
    with pytest.raises(BadInputError, match="blend"):
        type(m.card).from_json(data, "card.json")


def _check_manifest(labels: np.ndarray) -> SimpleNamespace:
    """Query and gallery items of each class alternate (as the split stage divides them)."""
    n = len(labels)
    seen: dict[int, int] = {}
    rank = [seen.__setitem__(int(c), seen.get(int(c), -1) + 1) or seen[int(c)] for c in labels]
    return SimpleNamespace(
        items=[f"i{k}" for k in range(n)], labels=[f"c{int(c):03d}" for c in labels],
        query=[k for k in range(n) if rank[k] % 2 == 0],
        gallery=[k for k in range(n) if rank[k] % 2 == 1], pairs=[],
    )  # fmt: skip


def test_the_set_check_is_the_gates_verdict_on_the_same_rows(hard):
    """The map's check on a set and ``compat promote``'s judge of the configuration serving it,
    on the same manifest and rows: the same cells, difference and lower bound (the fast path
    against the gate itself)."""
    from compat.contracts.gate import judge
    from compat.contracts.schema import Contract

    pool_new, pool_old, pool_labels, _ = drifted_pairs(n=4000, classes=200, old_noise=2.5,
                                                       new_noise=2.0)  # fmt: skip
    fit, held = pool_labels < 150, pool_labels >= 150
    train_new, train_old, train_labels = pool_new[fit], pool_old[fit], pool_labels[fit]
    new, old, labels = pool_new[held], pool_old[held], pool_labels[held]
    manifest = _check_manifest(labels)
    cfg = CheckConfig()
    full = CheckSet("split:validation", manifest, new, old)
    for role, name in (("query-adapter", "adapt(v3)"), ("query-blend", "blend(v3)")):
        m = fit_map("procrustes", train_new, train_old, labels=train_labels.tolist(), role=role,
                    check_set=full)  # fmt: skip
        served = m.queries(new, old)
        # a blend selects its weight on half the set's classes and is checked on the other half
        checked = full if role == "query-adapter" else full.halves(0)[1]
        manifest = checked.manifest
        got, _ = check_on_set(served, old, checked, cfg)
        assert m.card.verdict.lower_bound == got.lower_bound and m.card.verdict.set == checked.name
        contract = Contract(
            version="v3", parent="v1", embedding_dim=new.shape[1], head="cosface",
            serve={"mode": role}, criteria=[{"protocol": "identification", "metric": "top1",
                                             "confidence": 0.95}],
        )  # fmt: skip
        verdict = judge(contract, manifest, {"v3": new, "v1": old}, adapted=served)
        [check] = verdict.results
        assert check.lhs == [name, "v1"] and check.description.startswith(
            f"identification top1: M({name}, v1)"
        )
        assert (check.lhs_value, check.rhs_value) == (got.served, got.old_self)
        assert check.lower_bound == pytest.approx(got.lower_bound, abs=1e-12)
        assert check.passed == (got.lower_bound > 0) == (m.refused is None)
    half1, half2 = full.halves(0)
    assert m.card.blend.set == half1.name == "split:validation (half 1 of its classes)"
    assert m.card.blend.selected_on == len(half1.manifest.query)
    first = {half1.manifest.labels[i] for i in half1.manifest.query}
    assert first.isdisjoint(half2.manifest.labels[i] for i in half2.manifest.query)
    assert len(half1.manifest.query) + len(half2.manifest.query) == len(full.manifest.query)


def test_a_map_its_fold_keeps_is_refused_by_the_set_as_the_gate_would(hard):
    """The fold holds classes the new model was trained on; where it fails on classes no model
    saw (here its rows of the set are noise), the set check decides: refused, with the set's
    numbers and its name in the reason."""
    pool_new, pool_old, pool_labels, _ = drifted_pairs(n=4000, classes=200, old_noise=2.0,
                                                       new_noise=0.5)  # fmt: skip
    fit, held = pool_labels < 150, pool_labels >= 150  # the set: classes the map never saw
    new, old, labels = pool_new[fit], pool_old[fit], pool_labels[fit]
    s_new, s_old, s_labels = pool_new[held], pool_old[held], pool_labels[held]
    noise = unit(np.random.default_rng(2).standard_normal(s_new.shape))
    bad = CheckSet("split:validation", _check_manifest(s_labels), noise, s_old, "f" * 16)
    m = fit_map("procrustes", new, old, labels=labels.tolist(), check_set=bad)
    assert m.card.heldout.lower_bound > 0  # the fold alone would keep it
    v, r = m.card.verdict, m.card.refused
    assert v.set == "split:validation" and v.fingerprint == "f" * 16 and v.lower_bound <= 0
    assert r is not None and r.baseline_kind == "old-self" and "split:validation" in r.reason
    assert f"{v.served:.4f}" in r.reason and f"{v.old_self:.4f}" in r.reason
    good = CheckSet("split:validation", _check_manifest(s_labels), s_new, s_old)
    kept = fit_map("procrustes", new, old, labels=labels.tolist(), check_set=good)
    assert kept.refused is None and kept.card.verdict.lower_bound > 0
    with pytest.raises(BadInputError, match="check set split:validation: the new rows"):
        fit_map("procrustes", new, old, labels=labels.tolist(),
                check_set=CheckSet("split:validation", good.manifest, s_new[:10], s_old))  # fmt: skip


def test_an_adapt_entry_with_a_blend_is_a_query_blend():
    e = AdaptConfig(new="v3", old="v1", kind="procrustes", blend="slerp")
    assert e.role == "query-blend" and e.blend == {"method": "slerp", "grid": 11, "weight": None}
    assert (e.source, e.target) == ("v3", "v1")
    assert AdaptConfig(new="v3", old="v1", kind="affine", role="query-blend").blend is not None
    assert AdaptConfig(new="v3", old="v1", kind="affine", blend={"weight": 0.5}).blend["weight"]
    for bad, match in (({"blend": {"grid": 1}}, "grid"), ({"blend": "lerp"}, "method"),
                       ({"blend": "slerp", "role": "gallery-map"}, "no blend")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            AdaptConfig(new="v3", old="v1", kind="procrustes", **bad)
