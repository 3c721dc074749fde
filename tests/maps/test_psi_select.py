"""psi never makes a gallery worse than leaving it alone: held-out pairs (whole classes), the
held-out retrieval score, early stopping on it, and the refusal of a psi that does not beat
the old gallery as it is (tiny synthetic pairs, seconds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compat.maps.psi import UpgradeModule, upgrade_array
from compat.maps.psi_config import UpgradeConfig
from compat.maps.psi_fit import _evaluate, fit_upgrade
from compat.maps.psi_heldout import gain_lower_bound, heldout_split, heldout_top1


def unit(x: np.ndarray) -> np.ndarray:  # one torch thread: tests/maps/conftest.py
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_heldout_top1_by_hand():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6]])
    g = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    # Pairs (no labels): q0 -> g0 right; q1 -> g1 (tie with g2, lower index) right;
    # q2 -> g1 (0.8, tie with g2) wrong; q3 -> g0 (0.8, tie with g3) wrong: 2 of 4.
    assert heldout_top1(q, g) == pytest.approx(0.5)
    # Classes, own pair left out: labels a a b b.
    # q0 -> best of g1 (0), g2 (0), g3 (1.0) = g3 (b): wrong. q1 -> g0 (0), g2 (1.0), g3 (0) =
    # g2 (b): wrong. q2 -> g0 (.6), g1 (.8), g3 (.6) = g1 (a): wrong. q3 -> g0 (.8): a, wrong.
    assert heldout_top1(q, g, ["a", "a", "b", "b"]) == pytest.approx(0.0)
    # Swap the labels of rows 1 and 3: a b b a -> q0 -> g3 (a) right; q1 -> g2 (b) right;
    # q2 -> g1 (b) right; q3 -> g0 (a) right.
    assert heldout_top1(q, g, ["a", "b", "b", "a"]) == pytest.approx(1.0)
    # A query whose class has no other row is left out: a b b c scores q1 and q2 only (both
    # right: 1.0); counting q0 (-> g3, c) and q3 (-> g0, a), both wrong, would give 0.5.
    assert heldout_top1(q, g, ["a", "b", "b", "c"]) == pytest.approx(1.0)
    assert np.isnan(heldout_top1(q[:0], g[:0]))


def test_gain_lower_bound_by_hand():
    with_psi = torch.tensor([1, 1, 0, 0, 1, 1, 1, 0], dtype=torch.bool)
    without = torch.tensor([0, 1, 0, 1, 0, 0, 1, 0], dtype=torch.bool)
    # d = 1 0 0 -1 1 1 0 0: mean 0.25; sample variance 3.5 / 7 = 0.5, so sd / sqrt(8) = 0.25;
    # z(0.95) = 1.644854: 0.25 - 1.644854 x 0.25 = -0.161213.
    assert gain_lower_bound(with_psi, without, 0.95) == pytest.approx(-0.161213, abs=1e-6)
    assert gain_lower_bound(with_psi, without, 0.5) == pytest.approx(0.25)  # z = 0: the gain
    assert gain_lower_bound(with_psi[:1], without[:1], 0.95) == pytest.approx(1.0)
    assert gain_lower_bound(with_psi, with_psi, 0.95) == 0.0
    assert np.isnan(gain_lower_bound(with_psi[:0], without[:0], 0.95))


def test_the_refusal_compares_the_gains_lower_bound_with_min_gain():
    rng, old, labels = _clustered(seed=2)
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    new = unit(old @ q + 0.1 * rng.standard_normal(old.shape))
    kept = _fit(old, new, labels)
    s = kept.summary
    assert kept.refused is None and s["val_queries"] == 24
    lower = s["val_top1_gain_lower_bound"]
    assert 0 < lower < s["val_top1"] - s["val_top1_without_upgrade"]  # below the point gain
    # At confidence 0.5 the bound is the point gain itself.
    half = _fit(old, new, labels, confidence=0.5).summary
    assert half["val_top1_gain_lower_bound"] == pytest.approx(
        half["val_top1"] - half["val_top1_without_upgrade"], abs=1e-6
    )
    # A bound equal to min_gain is not above it: refused; just below it: kept.
    assert _fit(old, new, labels, min_gain=lower).refused is not None
    assert _fit(old, new, labels, min_gain=lower - 1e-6).refused is None


def test_heldout_split_holds_out_whole_classes_deterministically():
    labels = [f"c{i % 10}" for i in range(100)]
    fit, val, kind = heldout_split(100, labels, 0.2, seed=3)
    assert kind == "classes" and len(fit) + len(val) == 100
    held = {labels[i] for i in val}
    assert len(held) == 2 and not held & {labels[i] for i in fit}  # disjoint classes
    again = heldout_split(100, labels, 0.2, seed=3)
    assert np.array_equal(again[0], fit) and np.array_equal(again[1], val)
    assert not np.array_equal(heldout_split(100, labels, 0.2, seed=4)[1], val)
    # Too few classes for two held-out ones, or no labels: rows.
    fit, val, kind = heldout_split(100, [f"c{i % 4}" for i in range(100)], 0.25, seed=0)
    assert kind == "rows" and len(val) == 25
    assert heldout_split(100, None, 0.1, seed=0)[2] == "rows"
    assert len(heldout_split(100, labels, 0.0, seed=0)[1]) == 0


def _clustered(seed: int = 0, classes: int = 12, per: int = 8, d: int = 8):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per)
    old = unit(
        rng.standard_normal((classes, d))[labels] + 0.6 * rng.standard_normal((len(labels), d))
    )
    return rng, old, [f"c{x}" for x in labels]


CFG = {"hidden": 64, "epochs": 30, "batch_size": 16, "lr": 1e-2, "device": "cpu"}
CFG.update(val_fraction=0.25)


def _fit(old, new, labels, **over):
    return fit_upgrade(old, new, UpgradeConfig(**{**CFG, **over}), labels=labels, quiet=True)


def _held_out(old, new, labels, seed=0):
    _, val, _ = heldout_split(len(old), labels, CFG["val_fraction"], seed)
    return torch.from_numpy(old[val]), torch.from_numpy(new[val]), [labels[i] for i in val]


def test_early_stopping_keeps_the_best_held_out_epoch():
    # Noisy targets and few pairs: the held-out loss falls, then psi overfits and it rises.
    rng, old, labels = _clustered()
    new = unit(old + 0.8 * rng.standard_normal(old.shape))
    fit = _fit(old, new, labels, monitor="loss", patience=None, refuse=False)
    losses = [r["val_loss"] for r in fit.rows]
    assert len(fit.rows) == 30
    best = int(np.argmin(losses)) + 1
    assert fit.summary["best_epoch"] == best < 30  # an early epoch, not the last
    assert losses[-1] > losses[best - 1]
    o_val, t_val, val_labels = _held_out(old, new, labels)
    again = _evaluate(fit.psi, o_val, t_val, "mse", val_labels)  # the weights kept are best's
    assert again["val_loss"] == pytest.approx(losses[best - 1], rel=1e-5)
    assert fit.summary["val_loss"] == pytest.approx(losses[best - 1], rel=1e-5)

    stopped = _fit(old, new, labels, monitor="loss", patience=3, refuse=False)
    assert stopped.summary["best_epoch"] == best
    assert stopped.summary["epochs_run"] == len(stopped.rows) == best + 3


def test_top1_monitor_ties_break_on_loss_and_the_start_counts():
    rng, old, labels = _clustered(seed=1)
    new = unit(old + 0.8 * rng.standard_normal(old.shape))
    fit = _fit(old, new, labels, monitor="top1", patience=None, refuse=False)
    o_val, t_val, val_labels = _held_out(old, new, labels)
    # The start (epoch 0) scored as the fit scores it: the residual psi starts as the identity
    # (its branch's output layer is zero, so psi(x) == x bit for bit, whatever the other
    # weights), through the same _evaluate: the same computation, so ties break the same way.
    cfg = UpgradeConfig(**CFG)
    identity = UpgradeModule(old.shape[1], new.shape[1], cfg.hidden, cfg.blocks, True).eval()
    start = {"epoch": 0, **_evaluate(identity, o_val, t_val, cfg.loss, val_labels)}
    assert start["val_top1"] == pytest.approx(heldout_top1(t_val, o_val, val_labels))
    rows = [start, *fit.rows]
    best = max(rows, key=lambda r: (r["val_top1"], -r["val_loss"]))
    assert fit.summary["best_epoch"] == best["epoch"]
    assert fit.summary["val_top1"] == pytest.approx(best["val_top1"])


def test_a_psi_that_beats_no_upgrade_is_kept():
    rng, old, labels = _clustered(seed=2)
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    new = unit(old @ q + 0.1 * rng.standard_normal(old.shape))  # a rotated space: backward fails
    fit = _fit(old, new, labels)
    s = fit.summary
    assert fit.refused is None and s["val_split"] == "classes"
    assert s["val_top1"] > s["val_top1_without_upgrade"] + 0.3
    assert fit.psi.residual


def test_a_psi_that_does_not_beat_no_upgrade_is_refused_and_is_the_identity():
    rng, old, labels = _clustered(seed=2)
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    new = unit(old @ q + 0.1 * rng.standard_normal(old.shape))
    # The same fit as above, but psi must now add 0.999 to top-1 (the most min_gain allows, top-1
    # being a share): out of reach, so refused.
    fit = _fit(old, new, labels, min_gain=0.999)
    r = fit.refused
    assert r is not None and r.metric == "top1"
    assert (
        r.psi == fit.summary["val_top1"] and r.backward == fit.summary["val_top1_without_upgrade"]
    )
    assert "lower bound" in r.reason and "no upgrade" in r.reason
    np.testing.assert_allclose(upgrade_array(fit.psi, old), old, atol=1e-6)
    # New rows equal to the old: nothing beats leaving them alone.
    same = _fit(old, old.copy(), labels)
    assert same.refused is not None
    np.testing.assert_allclose(upgrade_array(same.psi, old), old, atol=1e-6)
    # refuse: false keeps whatever was fitted.
    kept = _fit(old, new, labels, min_gain=0.999, refuse=False)
    assert kept.refused is None
    assert not np.allclose(upgrade_array(kept.psi, old), old, atol=1e-2)


def test_two_widths_cannot_be_refused_nor_residual():
    rng, old, labels = _clustered(seed=3)
    new = unit(np.tanh(old @ rng.standard_normal((8, 6))))
    fit = _fit(old, new, labels, min_gain=0.999, epochs=3)
    assert fit.refused is None and not fit.psi.residual
    assert "val_top1_without_upgrade" not in fit.summary


def test_labels_must_pair_with_rows():
    from compat.errors import BadInputError

    _, old, labels = _clustered()
    with pytest.raises(BadInputError, match="labels"):
        _fit(old, old, labels[:-1])


def test_a_psi_that_nothing_held_out_can_check_is_not_kept():
    """issue 30: val_fraction 0 is refused at validation (psi could never be checked), and a
    share too small to hold out one class refuses the psi with that reason."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="val_fraction: 0 holds nothing out"):
        UpgradeConfig(val_fraction=0)
    assert UpgradeConfig(val_fraction=0, refuse=False).val_fraction == 0  # asked for, unchecked
    rng, old, labels = _clustered(seed=2)
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    new = unit(old @ q + 0.1 * rng.standard_normal(old.shape))
    fit = _fit(old, new, labels, val_fraction=0.001)  # 0.1% of 96 rows: none held out
    assert fit.refused is not None and "no held-out pairs to check psi on" in fit.refused.reason
    assert fit.refused.psi is None and fit.refused.backward is None
    np.testing.assert_allclose(upgrade_array(fit.psi, old), old, atol=1e-6)


def test_min_gain_is_a_share_below_one():
    """A top-1 gain is a share: min_gain 1 or more could never be met, and the verdict on the
    validation split (compat.maps.verdict) refuses such a value too, so params refuse it."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="min_gain"):
        UpgradeConfig(min_gain=1.0)
