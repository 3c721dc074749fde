"""The adapted cells of a query adapter, M(adapt(new), old), beside M(new, old), M(old, old) and
M(new, new): a hand-checkable rotation, the row names, the checks of a map against the
evaluated versions, and a report left unchanged when no adapter is configured."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from compat.contracts.schema import adapter_name
from compat.errors import BadInputError
from compat.evaluate.adapted import (
    AdaptedRows,
    adapted_row,
    adapted_versions,
    best_served,
    evaluate_adapted,
    run_adapted,
    write_adapted,
)
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.manifest import evaluate_manifest
from compat.evaluate.protocols import create_protocols
from compat.evaluate.report import write_report
from compat.evaluate.runner import run_evaluation
from compat.maps.gallery import served_pair_maps
from compat.maps.query import adapted_embeddings, adapter_joins


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _rotation(d: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def synthetic(n_classes=30, per=6, d=16, seed=0):
    """v1 noisy; v2 less noisy in v1's space (BCT-compatible); v2p = v1's rows rotated by R: a
    model as good as v1 in a space of its own, so the exact adapter is R^T."""
    rng = np.random.default_rng(seed)
    labels = [f"c{c:03d}" for c in range(n_classes) for _ in range(per)]
    n = len(labels)
    query = [i for i in range(n) if i % per < per // 2]
    gallery = [i for i in range(n) if i % per >= per // 2 and i // per >= 3]
    pairs = [(int(a), int(b), labels[a] == labels[b]) for a, b in rng.integers(0, n, (300, 2))]
    pairs += [(c * per, c * per + 1, True) for c in range(n_classes)]
    manifest = SimpleNamespace(
        items=[f"i{k}" for k in range(n)], labels=labels, query=query, gallery=gallery,
        pairs=pairs, fingerprint="m1",
    )  # fmt: skip
    base = rng.standard_normal((n_classes, d))[np.repeat(np.arange(n_classes), per)]
    v1 = _unit(base + 1.0 * rng.standard_normal((n, d)))
    rot = _rotation(d, seed + 1)
    emb = {
        "v1": v1,
        "v2": _unit(base + 0.5 * rng.standard_normal((n, d))),
        "v2p": _unit(v1.astype(np.float64) @ rot),
    }
    return manifest, emb, rot


def _exact_adapter(emb, rot):
    """adapt(v2p) = v2p R^T, computed in float64: v1's rows to float32 rounding."""
    return _unit(emb["v2p"].astype(np.float64) @ rot.T)


CFG = dict(chain=["v1", "v2"], paragon={"v2": "v2p"}, bootstrap=200)


def test_a_rotation_adapter_gives_exactly_the_old_self_cell():
    """new = old R and adapt = R^T: M(adapt(new), old) is M(old, old) to the last digit, so the
    difference is 0 and BCT's strict criterion (lower bound > 0) is not met; recovery is the
    adapted cell over BCT's M(v2, v1)."""
    manifest, emb, rot = synthetic()
    rows = _exact_adapter(emb, rot)
    np.testing.assert_allclose(rows, emb["v1"], atol=1e-6)
    cfg = EvaluateConfig(**CFG)
    out = evaluate_adapted(
        manifest, emb, {"v2p-to-v1": AdaptedRows("v2p-to-v1", "v2p", "v1", rows)}, cfg
    )
    e = out["v2p-to-v1"]
    assert e["row"] == "adapt(v2p)" == adapter_name("v2p") and e["bct"] == "v2"
    assert e["cells"] == {
        "adapted": ["adapt(v2p)", "v1"], "native": ["v2p", "v1"], "old": ["v1", "v1"],
        "self": ["v2p", "v2p"], "bct": ["v2", "v1"],
    }  # fmt: skip
    assert set(e["metrics"]) == {"identification", "open-set", "verification"}
    protos = create_protocols(["identification"])
    direct = lambda q, g: evaluate_manifest(manifest, q, g, protos)["identification"].metrics  # noqa: E731
    for metric in ("top1", "mAP"):
        m = e["metrics"]["identification"][metric]
        assert m["adapted"] == m["old"] == direct(emb["v1"], emb["v1"])[metric]
        assert m["self"] == pytest.approx(m["old"], abs=1e-12)  # a rotation keeps every score
        assert m["native"] == direct(emb["v2p"], emb["v1"])[metric] < m["old"]  # another space
        assert m["bct"] == direct(emb["v2"], emb["v1"])[metric]
        d = m["adapted_minus_old"]
        assert d["value"] == 0.0 and d["lower_bound"] == 0.0 and d["interval"] == [0.0, 0.0]
        assert m["passes"] is False
        assert m["adapted_minus_native"]["value"] == pytest.approx(m["adapted"] - m["native"])
        assert m["adapted_minus_native"]["lower_bound"] > 0
        rec = m["recovery"]
        assert rec["value"] == pytest.approx(m["adapted"] / m["bct"])
        assert rec["interval"][0] <= rec["value"] <= rec["interval"][1]
        assert set(m["interval"]) == {"adapted", "native", "old", "self", "bct"}


def test_an_adapter_that_adds_information_passes_the_criterion():
    """Queries from a better model, mapped exactly into the old space, beat M(old, old)."""
    manifest, emb, rot = synthetic()
    better = {**emb, "v2p": _unit(emb["v2"].astype(np.float64) @ rot)}  # v2 rotated
    rows = _unit(better["v2p"].astype(np.float64) @ rot.T)
    out = evaluate_adapted(
        manifest, better, {"m": AdaptedRows("m", "v2p", "v1", rows)}, EvaluateConfig(**CFG)
    )
    m = out["m"]["metrics"]["identification"]["top1"]
    assert out["m"]["row"] == "adapt(m)"  # not the contract's default name v2p-to-v1
    assert m["adapted_minus_old"]["lower_bound"] > 0 and m["passes"] is True


def test_row_names():
    assert adapted_row("v3-to-v1", "v3", "v1") == adapter_name("v3") == "adapt(v3)"
    assert adapted_row("v3-to-v1-affine", "v3", "v1") == "adapt(v3-to-v1-affine)"
    assert adapted_row("v3-to-v2", "v3", "v1") == "adapt(v3-to-v2)"


def test_native_cell_of_two_widths_is_not_comparable_without_a_dim_mismatch():
    manifest, emb, _ = synthetic()
    wide = {**emb, "v2p": _unit(np.hstack([emb["v1"], emb["v2"]]))}  # 32 dims vs 16
    a = {"m": AdaptedRows("m", "v2p", "v1", emb["v1"])}
    cfg = EvaluateConfig(chain=["v1"], protocols=["identification"], bootstrap=0)
    e = evaluate_adapted(manifest, wide, a, cfg)["m"]
    assert e["cells"]["native"] is None and "not comparable" in e["native_note"]
    top1 = e["metrics"]["identification"]["top1"]
    assert top1["native"] is None and "adapted_minus_native" not in top1
    assert "interval" not in top1 and top1["adapted_minus_old"] == {"value": 0.0}
    e = evaluate_adapted(manifest, wide, a, cfg, dim_mismatch={"v2p": "truncate"})["m"]
    assert e["cells"]["native"] == ["v2p", "v1"] and "truncate" in e["native_note"]
    protos = create_protocols(["identification"])
    truncated = evaluate_manifest(manifest, wide["v2p"][:, :16], emb["v1"], protos)
    assert e["metrics"]["identification"]["top1"]["native"] == pytest.approx(
        truncated["identification"].metrics["top1"]
    )


# -- the runner path: maps saved by compat.maps, models that look rows up -----------------------


class _Fixed(nn.Module):
    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = torch.from_numpy(table)

    def forward(self, x):
        return self.table[((x[:, 0, 0, 0] + 1) * 127.5).round().long()]


def _save_map(folder, emb, *, role="query-adapter", new_sha="sha-v2p", kind="procrustes"):
    from compat.maps import CheckConfig, fit_map, save_map

    fitted = fit_map(
        kind, emb["v2p"], emb["v1"], params={}, check=CheckConfig(refuse=False), role=role,
        from_name="v2p", to_name="v1", source_info={"version": "v2p", "weights_sha256": new_sha},
        target_info={"version": "v1", "weights_sha256": "sha-v1"},
    )  # fmt: skip
    save_map(folder, fitted)
    return fitted


@pytest.fixture()
def runner(tmp_path):
    manifest, emb, _ = synthetic()
    n = len(manifest.items)
    images = np.zeros((n, 2, 2, 1), np.uint8)
    images[:, 0, 0, 0] = np.arange(n)
    pos = {item: k for k, item in enumerate(manifest.items)}
    models = {v: _Fixed(np.pad(e, ((0, 256 - n), (0, 0)))) for v, e in emb.items()}
    cards = {v: SimpleNamespace(weights_sha256=f"sha-{v}") for v in emb}
    loaded: list[str] = []

    def load_model(v):
        loaded.append(v)
        return models[v], cards[v]

    def run(cfg):
        return run_evaluation(
            cfg, manifest, lambda ids: images[[pos[i] for i in ids]], "src", load_model,
            tmp_path / "cache",
        )  # fmt: skip

    def adapted(cfg):
        both = served_pair_maps(cfg.forward, adapter_joins(cfg.adapters))
        return run_adapted(
            cfg, manifest, lambda ids: images[[pos[i] for i in ids]], "src", load_model,
            tmp_path / "cache", adapter_joins(cfg.adapters),
            lambda e, w: adapted_embeddings(cfg.adapters, e, w),
            weights_of=lambda v: cards[v].weights_sha256,
            upgrade=None if both is None else lambda e, w: both.upgrade(e, w)[0],
        )  # fmt: skip

    return SimpleNamespace(run=run, adapted=adapted, emb=emb, tmp=tmp_path, loaded=loaded)


def test_the_evaluate_report_ignores_adapters_and_the_adapted_stage_writes_its_own_file(runner):
    """The evaluate stage's report (every file it writes) is the same with or without
    ``adapters``; the adapted cells go to metrics/adapted.json, embedded through the same
    cache (the chain's versions are hits) and equal to the cells computed directly."""
    base = dict(chain=["v1", "v2"], paragon={"v2": "v2p"}, bootstrap=50)
    folder = runner.tmp / "maps" / "v2p-to-v1"
    _save_map(folder, runner.emb)
    plain = runner.run(EvaluateConfig(**base))
    cfg = EvaluateConfig(**base, adapters={"v2p-to-v1": str(folder)})
    with_adapters = runner.run(cfg)
    assert with_adapters == plain and "adapted" not in plain
    out = {}
    for name, rep in (("plain", plain), ("adapters", with_adapters)):
        write_report(rep, runner.tmp / name / "metrics", runner.tmp / name / "plots", images=False)
        root = runner.tmp / name
        out[name] = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.json")}
    assert out["adapters"] == out["plain"] and "metrics/adapted.json" not in out["plain"]

    runner.loaded.clear()
    adapted = runner.adapted(cfg)
    assert runner.loaded == []  # v2p, v1 and v2 were embedded by the evaluate run: cache hits
    assert adapted_versions(cfg, adapter_joins(cfg.adapters)) == ["v2p", "v1", "v2"]
    (path,) = write_adapted(adapted, runner.tmp / "metrics")
    assert path == runner.tmp / "metrics" / "adapted.json"
    e = json.loads(path.read_text())["v2p-to-v1"]
    assert e["map"]["kind"] == "procrustes" and e["map"]["refused"] is None and e["bct"] == "v2"
    top1 = e["metrics"]["identification"]["top1"]
    assert top1["adapted"] == top1["old"]  # Procrustes recovers the rotation (to ~1e-6)
    assert top1["old"] == plain["matrix"]["identification"]["top1"]["v1"]["v1"]
    assert top1["bct"] == plain["matrix"]["identification"]["top1"]["v2"]["v1"]
    assert top1["self"] == plain["matrix"]["identification"]["top1"]["v2p"]["v2p"]


def test_each_map_is_checked_against_the_evaluated_versions(runner):
    folder = runner.tmp / "maps" / "m"
    cfg = EvaluateConfig(chain=["v1"], protocols=["identification"], bootstrap=0,
                         adapters={"m": str(folder)})  # fmt: skip
    _save_map(folder, runner.emb, new_sha="sha-other")
    with pytest.raises(BadInputError, match=r"m/card\.json: from: fitted on v2p's weights"):
        runner.adapted(cfg)  # v2p is embedded although not in the chain: the map joins it
    _save_map(folder, runner.emb, role="gallery-map")
    with pytest.raises(BadInputError, match="role: a gallery-map map"):
        runner.adapted(cfg)
    fitted = _save_map(folder, runner.emb)
    e = runner.adapted(cfg)["m"]
    assert e["map"]["weights_sha256"] == fitted.card.weights_sha256
    assert e["bct"] is None and "recovery" not in e["metrics"]["identification"]["top1"]


def test_adapted_embeddings_apply_the_saved_map(tmp_path):
    _, emb, _ = synthetic()
    fitted = _save_map(tmp_path / "m", emb)
    assert adapter_joins({"m": tmp_path / "m"}) == {"m": ("v2p", "v1")}
    got = adapted_embeddings({"m": tmp_path / "m"}, emb, {"v2p": "sha-v2p", "v1": "sha-v1"})["m"]
    assert (got.new, got.old, got.row) == ("v2p", "v1", "adapt(m)")
    np.testing.assert_array_equal(got.rows, fitted.apply(emb["v2p"]))
    np.testing.assert_allclose(got.rows, emb["v1"], atol=1e-5)


def test_an_adapter_with_a_psi_of_the_same_pair_has_a_partial_backfill_curve():
    """Better queries (v2 rotated by R) served through the exact adapter R^T while psi (exact:
    psi(v1) = v1 R) upgrades v1's gallery. The curve runs from the adapted cell (f = 0) to the
    forward cell M(new, psi(old)) (f = 1); in between each row group is searched with its own
    query (adapt(q) on old rows, q on upgraded rows). Both maps are exact, so every score is
    that of v2's queries on v1's rows in one space: the whole curve, calibrated or raw, is that
    one cell."""
    manifest, emb, rot = synthetic()
    better = {**emb, "v2p": _unit(emb["v2"].astype(np.float64) @ rot)}
    rows = _unit(better["v2p"].astype(np.float64) @ rot.T)
    psi_v1 = _unit(emb["v1"].astype(np.float64) @ rot)
    cfg = EvaluateConfig(**CFG)
    adapted = {"m": AdaptedRows("m", "v2p", "v1", rows)}
    out = evaluate_adapted(manifest, better, adapted, cfg, upgraded={"v2p": ("v1", psi_v1)})
    e = out["m"]
    assert e["backfill"] == {
        "gallery": "psi(v1)", "note": None, "fractions": [0.0, 0.25, 0.5, 0.75, 1.0],
        "order": {"kind": "random", "seed": 0}, "calibration": "match",
    }  # fmt: skip
    protos = create_protocols(["identification"])
    direct = lambda q, g: evaluate_manifest(manifest, q, g, protos)["identification"].metrics  # noqa: E731
    one_space = direct(emb["v2"], emb["v1"])
    for metric in ("top1", "mAP"):
        m = e["metrics"]["identification"][metric]
        assert m["forward"] == direct(better["v2p"], psi_v1)[metric]
        assert m["forward"] == pytest.approx(one_space[metric], abs=1e-9)
        assert m["forward_minus_adapted"]["value"] == pytest.approx(m["forward"] - m["adapted"])
        assert m["forward_minus_old"]["value"] == pytest.approx(m["forward"] - m["old"])
        assert "forward" in m["interval"]
        for key in ("curve", "curve_raw"):
            points = m[key]
            assert [p["fraction"] for p in points] == [0.0, 0.25, 0.5, 0.75, 1.0]
            assert points[0]["value"] == m["adapted"] and points[-1]["value"] == m["forward"]
            for p in points:
                assert p["value"] == pytest.approx(one_space[metric], abs=1e-6), (key, p)
    # Without a psi, or with a psi of another pair: the entry is as before / says why not.
    plain = evaluate_adapted(manifest, better, adapted, cfg)["m"]
    assert "backfill" not in plain and "curve" not in plain["metrics"]["identification"]["top1"]
    other = evaluate_adapted(manifest, better, adapted, cfg, upgraded={"v2p": ("v2", psi_v1)})
    assert other["m"]["backfill"] == {
        "gallery": "psi(v2)",
        "note": "psi upgrades v2's gallery, not v1's: no curve",
    }
    assert "curve" not in other["m"]["metrics"]["identification"]["top1"]


def test_the_served_pair_curve_differs_from_raw_merging_where_the_spaces_score_differently():
    """A psi that upgrades v1's rows into a space whose scores spread wider than the adapted
    queries' scores on old rows: raw merging is not the calibrated curve in between, while
    the end points are shared."""
    manifest, emb, rot = synthetic()
    better = {**emb, "v2p": _unit(emb["v2"].astype(np.float64) @ rot)}
    rows = _unit(better["v2p"].astype(np.float64) @ rot.T)
    rng = np.random.default_rng(3)
    psi_v1 = _unit(emb["v2"].astype(np.float64) @ rot + 0.3 * rng.standard_normal(emb["v1"].shape))
    cfg = EvaluateConfig(**{**CFG, "protocols": ["identification"]})
    out = evaluate_adapted(
        manifest, better, {"m": AdaptedRows("m", "v2p", "v1", rows)}, cfg,
        upgraded={"v2p": ("v1", psi_v1)},
    )  # fmt: skip
    m = out["m"]["metrics"]["identification"]["mAP"]
    cal, raw = m["curve"], m["curve_raw"]
    assert cal[0] == raw[0] and cal[-1] == raw[-1]
    assert any(c["value"] != r["value"] for c, r in zip(cal[1:-1], raw[1:-1], strict=True))


def test_a_gallery_map_on_an_adapters_pair_gives_the_served_pair_curve(runner):
    """The stage's path: evaluate.forward names a gallery map v1 -> v2p (fitted by compat.maps,
    exact: v2p is a rotation of v1) and evaluate.adapters the adapter v2p -> v1. Only that pair
    is picked (a forward map of a version no adapter serves is never opened), and the entry has
    the forward cell and a flat curve: both maps are exact."""
    from compat.maps import CheckConfig, fit_map, save_map

    emb = runner.emb
    adapter = runner.tmp / "maps" / "v2p-to-v1"
    _save_map(adapter, emb)
    psi = runner.tmp / "maps" / "v1-to-v2p"
    fitted = fit_map(
        "procrustes", emb["v1"], emb["v2p"], params={}, check=CheckConfig(refuse=False),
        role="gallery-map", from_name="v1", to_name="v2p",
        source_info={"version": "v1", "weights_sha256": "sha-v1"},
        target_info={"version": "v2p", "weights_sha256": "sha-v2p"},
    )  # fmt: skip
    save_map(psi, fitted)
    forward = {"v2p": str(psi), "v2": str(runner.tmp / "nowhere")}  # v2: no adapter, not opened
    cfg = EvaluateConfig(
        chain=["v1", "v2"], paragon={"v2": "v2p"}, protocols=["identification"], bootstrap=50,
        adapters={"v2p-to-v1": str(adapter)}, forward=forward,
    )  # fmt: skip
    both = served_pair_maps(cfg.forward, adapter_joins(cfg.adapters))
    assert both is not None and list(both.maps) == ["v2p"] and both.sources() == {"v2p": "v1"}
    e = runner.adapted(cfg)["v2p-to-v1"]
    assert e["backfill"]["gallery"] == "psi(v1)" and e["backfill"]["note"] is None
    top1 = e["metrics"]["identification"]["top1"]
    assert top1["forward"] == pytest.approx(top1["self"], abs=1e-9)
    assert [p["fraction"] for p in top1["curve"]] == [0.0, 0.25, 0.5, 0.75, 1.0]
    for p in top1["curve"]:
        assert p["value"] == pytest.approx(top1["old"], abs=0.02)
    assert served_pair_maps({}, adapter_joins(cfg.adapters)) is None


def test_a_query_blend_is_evaluated_as_served(tmp_path):
    """Issue 42 item 1: a blend's adapted cell is M(blend(new), old), its rows the adapted
    queries interpolated with the old version's own rows of the same items; named as the gate
    names it for the default folder ``<new>-to-<old>-blend``."""
    from compat.maps import CheckConfig, fit_map, save_map
    from compat.maps.blend import slerp

    manifest, emb, _ = synthetic()
    assert adapted_row("v3-to-v1-blend", "v3", "v1", "query-blend") == "blend(v3)"
    assert adapted_row("b", "v3", "v1", "query-blend") == "blend(b)"
    assert adapter_name("v3", "query-blend") == "blend(v3)"
    fitted = fit_map("procrustes", emb["v2p"], emb["v1"], role="query-blend", blend={"weight": 0.5},
                     check=CheckConfig(refuse=False), from_name="v2p", to_name="v1")  # fmt: skip
    save_map(tmp_path / "v2p-to-v1-blend", fitted)
    got = adapted_embeddings({"v2p-to-v1-blend": tmp_path / "v2p-to-v1-blend"}, emb)
    a = got["v2p-to-v1-blend"]
    assert (a.row, a.role, a.info["blend_weight"]) == ("blend(v2p)", "query-blend", 0.5)
    np.testing.assert_array_equal(a.rows, slerp(emb["v1"], fitted.apply(emb["v2p"]), 0.5))
    out = evaluate_adapted(manifest, emb, got, EvaluateConfig(**CFG, protocols=["identification"]))
    assert out["v2p-to-v1-blend"]["cells"]["adapted"] == ["blend(v2p)", "v1"]


def _entry(new, old, served, kept, lb):
    top1 = {"adapted": served, "old": kept, "passes": lb > 0,
            "adapted_minus_old": {"value": served - kept, "lower_bound": lb}}  # fmt: skip
    return {"new": new, "old": old, "metrics": {"identification": {"top1": top1}}}


def test_best_served_names_the_best_or_the_closest_configuration():
    entries = {
        "a": _entry("v3", "v1", 0.60, 0.55, 0.02),
        "b": _entry("v3", "v1", 0.62, 0.55, 0.05),
        "c": _entry("v2", "v1", 0.50, 0.55, -0.08),
        "d": _entry("v2", "v1", 0.54, 0.55, -0.03),
    }
    v3, v2 = best_served(entries)
    assert (v3["best"], v3["passes"], v3["passing"], v3["configurations"]) == ("b", True, 2, 2)
    assert (v2["best"], v2["passes"], v2["passing"], v2["lower_bound"]) == ("d", False, 0, -0.03)
    assert (v2["served"], v2["kept"]) == (0.54, 0.55)
    assert v3["refused"] == v2["refused"] == []
    assert (v3["best_servable"], v2["best_servable"]) == ("b", "d")
    entries["b"]["map"] = {
        "refused": "on split:validation ...: the gain's lower bound is not above 0"
    }
    v3 = best_served(entries)[0]
    assert v3["refused"] == ["b"]  # best on evaluation, but never served
    assert (v3["passing"], v3["servable_passing"]) == (2, 1)
    assert (v3["best"], v3["best_servable"]) == ("b", "a")  # the best the gate may serve


def test_a_counterpart_sets_a_model_trained_elsewhere_beside_bct_with_bcts_gain():
    """``evaluate.counterpart``: v2s, trained apart (not a paragon), is compared with BCT's v2 on
    the same data: recovery M(adapt(v2s), v1) / M(v2, v1), and BCT's update gain measured
    against v2s, (M(v2, v1) - M(v1, v1)) / (M(v2s, v2s) - M(v1, v1)) (BCT Eq. 9, the paper's
    paragon)."""
    manifest, emb, rot = synthetic()
    emb.pop("v2p")
    emb["v2s"] = _unit(emb["v2"].astype(np.float64) @ rot)  # as good as v2, in its own space
    cfg = EvaluateConfig(chain=["v1", "v2"], counterpart={"v2s": "v2"}, bootstrap=200,
                         protocols=["identification"])  # fmt: skip
    assert adapted_versions(cfg, {"m": ("v2s", "v1")}) == ["v2s", "v1", "v2"]
    rows = _unit(emb["v2s"].astype(np.float64) @ rot.T)
    e = evaluate_adapted(manifest, emb, {"m": AdaptedRows("m", "v2s", "v1", rows)}, cfg)["m"]
    m = e["metrics"]["identification"]["top1"]
    assert e["bct"] == "v2" and m["recovery"]["value"] == pytest.approx(m["adapted"] / m["bct"])
    g = m["bct_gain"]
    assert g["value"] == pytest.approx((m["bct"] - m["old"]) / (m["self"] - m["old"]))
    assert g["interval"][0] <= g["value"] <= g["interval"][1]
    for bad in ({"v2s": "v3"}, {"v1": "v2"}):
        with pytest.raises(ValueError, match="counterpart"):
            EvaluateConfig(chain=["v1", "v2"], counterpart=bad)
