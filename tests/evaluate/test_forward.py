"""The forward result M(new, psi(old)) and the partial-backfill curve: values, the mixed
gallery, the files, and the runner path with a real upgrade module folder."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from compat.evaluate.config import EvaluateConfig
from compat.evaluate.forward import (
    backfill_order,
    evaluate_forward,
    flat_forward,
    mixed_gallery,
    upgrade_mask,
    write_forward,
)
from compat.evaluate.manifest import evaluate_manifest
from compat.evaluate.protocols import create_protocols
from compat.evaluate.report import write_report
from compat.evaluate.runner import run_evaluation


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def synthetic(n_classes=50, per=6, d=16, seed=0):
    """v1 noisy, v2 less noisy in the same space (backward compatible), psi(v1) close to v2."""
    rng = np.random.default_rng(seed)
    labels = [f"c{c:03d}" for c in range(n_classes) for _ in range(per)]
    n = len(labels)
    query = [i for i in range(n) if i % per < per // 2]
    gallery = [i for i in range(n) if i % per >= per // 2 and i // per >= 5]
    pairs = [(int(a), int(b), labels[a] == labels[b]) for a, b in rng.integers(0, n, (400, 2))]
    pairs += [(c * per, c * per + 1, True) for c in range(n_classes)]
    manifest = SimpleNamespace(
        items=[f"i{k}" for k in range(n)], labels=labels, query=query, gallery=gallery,
        pairs=pairs, fingerprint="m1",
    )  # fmt: skip
    base = rng.standard_normal((n_classes, d))[np.repeat(np.arange(n_classes), per)]
    v2 = _unit(base + 0.5 * rng.standard_normal((n, d)))
    emb = {
        "v1": _unit(base + 1.3 * rng.standard_normal((n, d))),
        "v2": v2,
        "v2p": _unit(base + 0.4 * rng.standard_normal((n, d))),
    }
    up = _unit(v2 + 0.15 * rng.standard_normal((n, d)))
    return manifest, emb, up


def test_mixed_gallery_upgrades_exact_shares_in_a_seeded_order():
    manifest, emb, up = synthetic()
    order = backfill_order(manifest, seed=3)
    assert sorted(order[0].tolist()) == sorted(manifest.gallery)
    assert len(order[0]) + len(order[1]) == len(manifest.items)
    assert backfill_order(manifest, 3)[0].tolist() == order[0].tolist()
    assert backfill_order(manifest, 4)[0].tolist() != order[0].tolist()
    for f in (0.0, 0.25, 0.5, 1.0):
        g = mixed_gallery(emb["v1"], up, upgrade_mask(len(manifest.items), order, f))
        changed = np.flatnonzero((g != emb["v1"]).any(axis=1))
        gal = np.intersect1d(changed, manifest.gallery)
        assert len(gal) == int(f * len(manifest.gallery))
        assert np.array_equal(g[changed], up[changed])
    assert np.array_equal(mixed_gallery(emb["v1"], up, upgrade_mask(len(up), order, 1.0)), up)


def test_forward_beats_backward_and_the_curve_joins_them():
    manifest, emb, up = synthetic()
    cfg = EvaluateConfig(chain=["v1", "v2"], paragon={"v2": "v2p"}, bootstrap=100)
    fwd = evaluate_forward(manifest, emb, {"v2": ("v1", up)}, cfg)
    e = fwd["v2"]
    assert e["from"] == "v1" and e["gallery"] == "psi(v1)" and e["paragon"] == "v2p"
    top1 = e["metrics"]["identification"]["top1"]
    # The terms are the plain cells, computed the way the chain report computes them.
    protos = create_protocols(["identification"])
    direct = lambda q, g: evaluate_manifest(manifest, q, g, protos)["identification"].metrics  # noqa: E731
    assert top1["backward"] == pytest.approx(direct(emb["v2"], emb["v1"])["top1"])
    assert top1["forward"] == pytest.approx(direct(emb["v2"], up)["top1"])
    assert top1["old"] == pytest.approx(direct(emb["v1"], emb["v1"])["top1"])
    assert top1["forward"] > top1["backward"] > top1["old"]
    fb = top1["forward_minus_backward"]
    assert fb["value"] == pytest.approx(top1["forward"] - top1["backward"])
    assert fb["lower_bound"] > 0 and fb["interval"][0] <= fb["value"] <= fb["interval"][1]
    assert top1["gain_forward"]["value"] > top1["gain_backward"]["value"]
    curve = top1["curve"]
    assert [p["fraction"] for p in curve] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert curve[0]["value"] == top1["backward"] and curve[-1]["value"] == top1["forward"]
    assert curve[0]["value"] < curve[2]["value"] < curve[-1]["value"]
    raw = top1["curve_raw"]
    assert raw[0] == curve[0] and raw[-1] == curve[-1]  # the end points are single-group cells
    assert e["calibration"] == "match"
    assert set(e["metrics"]) == {"identification", "open-set", "verification"}


def test_identity_psi_leaves_the_curve_flat():
    """A psi that changes nothing (a refused one) changes no score: every point of the curve is
    the backward cell. Moments of two disjoint random halves would differ by sampling alone and
    make this curve wobble (issue 17: 57.8, 57.5, 58.3, 57.3, 57.8 on the hard configuration)."""
    manifest, emb, _ = synthetic()
    # The curve's cells score calibrated rows (q . m + q . (g - m), 2d wide), the backward
    # cell q . g: equal up to float32 rounding (~1e-7 here). Every metric is a function of
    # orders (a positive against another row; a query's top score against another's; a
    # genuine pair against an impostor), and each such gap is above 1e-5 in this data, so
    # both paths give the same metrics on any processor; the gaps are asserted, not assumed.
    labels, q, g = np.array(manifest.labels), np.array(manifest.query), np.array(manifest.gallery)
    scores = (emb["v2"][q] @ emb["v1"][g].T).astype(np.float64)
    same = labels[q][:, None] == labels[g][None, :]
    row_gaps = [np.abs(r[p][:, None] - r[~p][None, :]).min()
                for r, p in zip(scores, same, strict=True) if p.any() and (~p).any()]  # fmt: skip
    assert min(row_gaps) > 1e-5
    assert np.diff(np.sort(scores.max(axis=1))).min() > 1e-5
    pairs = np.array([(a, b) for a, b, _ in manifest.pairs])
    genuine = np.array([t for *_, t in manifest.pairs])
    pair = (emb["v2"][pairs[:, 0]] * emb["v1"][pairs[:, 1]]).sum(1).astype(np.float64)
    assert np.abs(pair[genuine][:, None] - pair[~genuine][None, :]).min() > 1e-5
    cfg = EvaluateConfig(chain=["v1", "v2"], bootstrap=0)
    e = evaluate_forward(manifest, emb, {"v2": ("v1", emb["v1"].copy())}, cfg)["v2"]
    for protocol, metrics in e["metrics"].items():
        for name, m in metrics.items():
            if m.get("curve") is None:
                continue
            values = [p["value"] for p in m["curve"]]
            assert values == pytest.approx([m["backward"]] * len(values), abs=1e-9), (
                protocol,
                name,
            )


def test_dimension_changing_psi_has_only_curve_end_points():
    manifest, emb, _ = synthetic()
    emb["v1"] = emb["v1"][:, :8].copy()
    cfg = EvaluateConfig(chain=["v1", "v2"], protocols=["identification"], bootstrap=0)
    e = evaluate_forward(manifest, emb, {"v2": ("v1", emb["v2"])}, cfg)["v2"]
    top1 = e["metrics"]["identification"]["top1"]
    assert top1["backward"] is None and "forward_minus_backward" not in top1
    assert [p["fraction"] for p in top1["curve"]] == [1.0] and "no mixed gallery" in e["curve_note"]


def test_files(tmp_path):
    manifest, emb, up = synthetic()
    cfg = EvaluateConfig(chain=["v1", "v2"], protocols=["identification"], bootstrap=0)
    fwd = evaluate_forward(manifest, emb, {"v2": ("v1", up)}, cfg)
    paths = write_forward(fwd, tmp_path / "metrics", tmp_path / "plots")
    flat = json.loads((tmp_path / "metrics/forward.json").read_text())
    assert flat == flat_forward(fwd)
    assert set(flat["v2"]["identification"]["top1"]) >= {"old", "backward", "forward", "self"}
    rows = json.loads((tmp_path / "plots/backfill/v2_identification.json").read_text())
    assert [r["fraction"] for r in rows] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert {"mAP", "mAP_raw", "top1", "top1_raw"} <= set(rows[0])
    assert (tmp_path / "plots/backfill_v2.png").read_bytes()[:4] == b"\x89PNG"
    assert len(paths) == 3


def test_config_forward_fields():
    c = EvaluateConfig(chain=["v1", "v2"], forward={"v2": "models/v2/upgrade"})
    assert c.backfill_fractions == [0.0, 0.25, 0.5, 0.75, 1.0] and c.versions() == ["v1", "v2"]
    assert EvaluateConfig(chain=["v1"]).forward == {}
    with pytest.raises(ValueError, match=r"'v3' is neither in the chain .* nor a paragon"):
        EvaluateConfig(chain=["v1"], forward={"v3": "x"})
    # A paragon may have a psi too (an outside model whose gallery maps are evaluated).
    p = EvaluateConfig(chain=["v1", "v2"], paragon={"v2": "v2p"}, forward={"v2p": "m/up"})
    assert p.forward == {"v2p": "m/up"} and p.versions() == ["v1", "v2", "v2p"]
    with pytest.raises(ValueError, match="increasing"):
        EvaluateConfig(chain=["v1"], backfill_fractions=[0.5, 0.25])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        EvaluateConfig(chain=["v1"], backfill_fractions=[1.5])


class _Fixed(nn.Module):
    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = torch.from_numpy(table)

    def forward(self, x):
        return self.table[((x[:, 0, 0, 0] + 1) * 127.5).round().long()]


def test_runner_adds_the_forward_section_only_when_configured(tmp_path):
    from compat.maps.psi import UpgradeModule, save_upgrade

    manifest, emb, _ = synthetic(n_classes=30)
    n = len(manifest.items)
    images = np.zeros((n, 2, 2, 1), np.uint8)
    images[:, 0, 0, 0] = np.arange(n)
    pos = {item: k for k, item in enumerate(manifest.items)}
    models = {v: _Fixed(np.pad(e, ((0, 256 - n), (0, 0)))) for v, e in emb.items()}
    cards = {v: SimpleNamespace(weights_sha256=f"sha-{v}") for v in emb}
    torch.manual_seed(0)
    psi_card = save_upgrade(
        tmp_path / "psi", UpgradeModule(16, 16, 8).eval(),
        {"from": "v1", "to": "v2", "from_weights_sha256": "sha-v1", "to_weights_sha256": "sha-v2"},
    )  # fmt: skip

    def run(cfg):
        from compat.maps.gallery import ForwardMaps  # the evaluate stage opens the maps

        return run_evaluation(
            cfg, manifest, lambda ids: images[[pos[i] for i in ids]], "src",
            lambda v: (models[v], cards[v]), tmp_path / "cache",
            gallery_maps=ForwardMaps(cfg.forward) if cfg.forward else None,
        )  # fmt: skip

    plain = run(EvaluateConfig(chain=["v2"], protocols=["identification"], bootstrap=0))
    assert "forward" not in plain
    cfg = EvaluateConfig(
        chain=["v2"],
        protocols=["identification"],
        bootstrap=0,
        forward={"v2": str(tmp_path / "psi")},
    )
    rep = run(cfg)  # v1 is not in the chain: embedded because psi upgrades from it
    e = rep["forward"]["v2"]
    assert e["psi"] == {
        "path": str(tmp_path / "psi"),
        "weights_sha256": psi_card.weights_sha256,
        "from": "v1",
        "refused": None,  # kept: the outcome of the refusal test is recorded either way
        "held_out_lower_bound": None,  # this card records no fit
    }
    assert e["metrics"]["identification"]["top1"]["old"] is not None
    assert rep["matrix"] == plain["matrix"]  # the chain evaluation is unchanged
    written = write_report(rep, tmp_path / "metrics", tmp_path / "plots", images=False)
    assert tmp_path / "metrics" / "forward.json" in written

    cards["v1"] = SimpleNamespace(weights_sha256="sha-v1-retrained")
    with pytest.raises(Exception, match="re-run upgrade@v2"):
        run(cfg)
