"""psi judged as the gate judges a gallery served through it (issue 42): on classes no training
set holds, M(new, psi(old)) against M(old, old). psi's own held-out check compares with no
upgrade, which for a model with no tie to the old one is near chance, so it keeps a psi that
still loses to keeping the old model; the verdict refuses that psi (tiny synthetic pairs)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from compat.maps.psi import upgrade_array
from compat.maps.psi_config import UpgradeConfig
from compat.maps.psi_fit import HeldOutSet, fit_upgrade, judged

CFG = UpgradeConfig(hidden=64, epochs=30, batch_size=16, lr=1e-2, device="cpu", loss="cosine",
                    residual=False, val_fraction=0.25)  # fmt: skip


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _spaces(classes: int, per: int, old_noise: float, new_noise: float, seed: int):
    """Two unrelated spaces of the same classes: old = centre + noise; new = a random rotation
    of (centre + its own noise), so new queries on the old gallery score near chance."""
    rng = np.random.default_rng(seed)
    d = 16
    labels = np.repeat(np.arange(classes), per)
    centres = rng.standard_normal((classes, d))[labels]
    rotation = np.linalg.qr(rng.standard_normal((d, d)))[0]
    old = unit(centres + old_noise * rng.standard_normal(centres.shape))
    new = unit((centres + new_noise * rng.standard_normal(centres.shape)) @ rotation)
    return old, new, [f"c{x}" for x in labels]


def _held_out(labels: list[str]) -> SimpleNamespace:
    """Half of each class's rows as queries, the other half as the gallery."""
    n = len(labels)
    query = [i for i in range(n) if i % 2 == 0]
    gallery = [i for i in range(n) if i % 2 == 1]
    return SimpleNamespace(items=list(range(n)), labels=labels, query=query, gallery=gallery,
                           pairs=[])  # fmt: skip


def _case(old_noise: float, new_noise: float):
    """psi fitted on 40 training classes, judged on 30 other classes (the validation split)."""
    old, new, labels = _spaces(70, 8, old_noise, new_noise, seed=0)
    fit_rows = slice(0, 40 * 8)
    held = slice(40 * 8, None)
    fit = fit_upgrade(old[fit_rows], new[fit_rows], CFG, labels=labels[fit_rows], quiet=True)
    check = HeldOutSet("split:validation", _held_out(labels[held]), np.zeros((0,)), "f" * 16)
    return fit, check, old[held], new[held]


def test_a_psi_kept_by_its_own_check_is_refused_where_keeping_the_old_model_wins():
    # The new model is far noisier than the old: psi beats its raw queries by far (its own
    # check keeps it), but the upgraded gallery searched by noisy queries loses to M(old, old).
    fit, check, old, new = _case(old_noise=0.3, new_noise=1.6)
    assert fit.refused is None and fit.summary["val_top1_gain_lower_bound"] > 0.2
    out = judged(fit, check, old, new, CFG, seed=0)
    v = out.summary["verdict"]
    assert v["set"] == "split:validation" and v["queries"] == 120
    assert v["served"] < v["old_self"] and v["lower_bound"] < 0
    assert out.refused is not None and out.refused.psi == pytest.approx(v["served"])
    assert (
        "as the gate judges" in out.refused.reason and "psi is the identity" in out.refused.reason
    )
    assert np.allclose(upgrade_array(out.psi, old[:5]), old[:5], atol=1e-6)  # the identity


def test_a_psi_that_beats_keeping_the_old_model_is_kept_with_its_numbers():
    # The new model's rows are its class centres, the old ones noisy: the new queries on
    # psi(old gallery) beat the old queries on the old gallery (0.733 against 0.592 here).
    fit, check, old, new = _case(old_noise=1.0, new_noise=0.0)
    out = judged(fit, check, old, new, CFG, seed=0)
    v = out.summary["verdict"]
    assert out.refused is None and out.psi is fit.psi
    assert v["lower_bound"] > 0 and v["served"] > v["old_self"]
    assert v["difference"] == pytest.approx(v["served"] - v["old_self"])


def test_refusal_off_records_the_verdict_and_keeps_psi():
    fit, check, old, new = _case(old_noise=0.3, new_noise=1.6)
    cfg = CFG.model_copy(update={"refuse": False})
    out = judged(fit, check, old, new, cfg, seed=0)
    assert out.refused is None and out.summary["verdict"]["lower_bound"] < 0


def test_an_already_refused_psi_is_left_as_it_is():
    fit, check, old, new = _case(old_noise=0.3, new_noise=1.6)
    refused = judged(fit, check, old, new, CFG, seed=0)
    assert judged(refused, check, old, new, CFG, seed=0) is refused


def test_a_psi_between_other_widths_is_judged_and_recorded_but_kept():
    # No identity to fall back on (fit_upgrade never refuses such a psi either): the verdict is
    # recorded, so a loss to keeping the old model is still seen.
    all_old, all_new, labels = _spaces(70, 8, 0.3, 1.6, seed=0)
    wide = np.hstack([all_new, all_new]) / np.sqrt(2)
    rows = slice(0, 40 * 8)
    fit = fit_upgrade(all_old[rows], wide[rows], CFG, labels=labels[rows], quiet=True)
    check = HeldOutSet("split:validation", _held_out(labels[40 * 8 :]), np.zeros((0,)), "f" * 16)
    out = judged(fit, check, all_old[40 * 8 :], wide[40 * 8 :], CFG, seed=0)
    assert out.refused is None and out.psi is fit.psi
    assert out.summary["verdict"]["lower_bound"] < 0
