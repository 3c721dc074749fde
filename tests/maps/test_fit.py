"""fit_map: every kind fits; the refusal rule keeps a useful map and refuses a useless one,
with both numbers; labels are optional; parameters are checked."""

from __future__ import annotations

import numpy as np
import pytest

from compat.errors import BadInputError, UsageError
from compat.maps import CheckConfig, fit_map
from tests.maps.conftest import drifted_pairs

MLP = {"epochs": 40, "hidden": 64, "blocks": 1, "lr": 1e-2, "weight_decay": 0.0,
       "device": "cpu", "patience": None}  # fmt: skip


@pytest.fixture(scope="module")
def pairs():
    return drifted_pairs(n=1200, old_noise=1.5, new_noise=0.5)


@pytest.mark.parametrize("kind", ["procrustes", "affine"])
def test_a_useful_adapter_is_kept_against_the_old_self_test(pairs, kind):
    new, old, labels, _ = pairs
    m = fit_map(kind, new, old, labels=labels.tolist(), from_name="v2", to_name="v1")
    h = m.card.heldout
    # the raw new rows are near chance against the old ones: the bar is M(old, old)
    assert h.baseline_kind == "old-self" and h.no_map < 2 * h.chance
    assert h.mapped > h.old_self == h.baseline and h.lower_bound > 0
    assert m.refused is None and m.card.refused is None
    assert (h.split, h.retrieval, h.num_fit + h.num_heldout) == ("classes", "class", 1200)
    assert m.card.from_ == "v2" and m.card.to == "v1" and m.card.data.labelled
    assert m.card.fit_seconds >= 0 and len(m.card.weights_sha256) == 64


def test_a_useless_adapter_is_refused_with_both_numbers(pairs):
    _, old, labels, _ = pairs
    noise = np.random.default_rng(7).standard_normal(old.shape)  # random pairs
    m = fit_map("affine", noise, old, labels=labels.tolist())
    h, r = m.card.heldout, m.card.refused
    assert r is not None and r.baseline_kind == "old-self"
    assert r.mapped == h.mapped and r.baseline == h.baseline and r.lower_bound <= 0
    assert f"{h.mapped:.4f}" in r.reason and f"{h.baseline:.4f}" in r.reason


def test_without_labels_rows_are_held_out_and_pairs_retrieved(pairs):
    new, old, _, _ = pairs
    m = fit_map("procrustes", new, old)
    h = m.card.heldout
    assert (h.split, h.retrieval, h.baseline_kind, h.old_self) == ("rows", "pair", "no-map", None)
    assert h.mapped > 5 * h.no_map and m.refused is None
    noise = np.random.default_rng(3).standard_normal(new.shape)
    assert fit_map("procrustes", noise, old).refused is not None


def test_a_compatible_pair_must_beat_the_raw_rows(pairs):
    _, old, labels, _ = pairs
    close = old + 0.05 * np.random.default_rng(1).standard_normal(old.shape)
    m = fit_map("procrustes", close, old, labels=labels.tolist())
    assert m.card.heldout.baseline_kind == "no-map"
    assert m.card.heldout.baseline == m.card.heldout.no_map


def test_two_widths_new_256_to_old_128():
    new, old, labels, _ = drifted_pairs(n=3000, d_new=256, d_old=128, classes=60,
                                        old_noise=4.0, new_noise=0.5)  # fmt: skip
    m = fit_map("procrustes", new, old, labels=labels.tolist())
    assert (m.card.in_dim, m.card.out_dim) == (256, 128)
    assert m.card.heldout.baseline_kind == "old-self"  # no raw cross test between two widths
    assert m.refused is None, m.refused
    assert m.apply(new[:5]).shape == (5, 128)


def test_residual_mlp_fits_with_psis_loop(pairs):
    new, old, labels, _ = pairs
    plain = fit_map("residual-mlp", new, old, labels=labels.tolist(),
                    params={**MLP, "residual": False, "loss": "cosine"})  # fmt: skip
    assert plain.card.params["residual"] is False and plain.card.params["hidden"] == 64
    assert plain.card.heldout.mapped > 0.8 and plain.refused is None
    residual = fit_map("residual-mlp", new, old, labels=labels.tolist(), params=MLP)
    h = residual.card.heldout
    assert residual.card.params["residual"] is True
    assert h.mapped > 3 * h.no_map  # it learned something, whether kept or not
    # two widths: the plain MLP (no residual branch)
    wide, old2, lab2, _ = drifted_pairs(n=600, d_new=48, d_old=32)
    m = fit_map("residual-mlp", wide, old2, labels=lab2.tolist(),
                params={**MLP, "epochs": 3})  # fmt: skip
    assert m.card.params["residual"] is False and m.apply(wide[:3]).shape == (3, 32)


def test_gallery_map_role_maps_old_rows_into_the_new_space(pairs):
    new, old, labels, _ = pairs
    m = fit_map("procrustes", old, new, labels=labels.tolist(), role="gallery-map")
    assert m.card.role == "gallery-map" and m.card.heldout.mapped is not None


def test_the_fit_is_deterministic(pairs):
    new, old, labels, _ = pairs
    a = fit_map("affine", new, old, labels=labels.tolist())
    b = fit_map("affine", new, old, labels=labels.tolist())
    assert a.card.weights_sha256 == b.card.weights_sha256
    assert a.card.heldout == b.card.heldout


def test_bad_kind_params_and_pairs():
    x = np.random.default_rng(0).standard_normal((40, 8))
    with pytest.raises(UsageError, match="unknown map kind 'rotation'; known: affine"):
        fit_map("rotation", x, x)
    with pytest.raises(UsageError, match="map affine: rdige: unknown parameter"):
        fit_map("affine", x, x, params={"rdige": 1})
    with pytest.raises(UsageError, match="ridge"):
        fit_map("affine", x, x, params={"ridge": -1})
    with pytest.raises(BadInputError, match="equal n"):
        fit_map("affine", x, x[:30])
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(BadInputError, match="NaN"):
        fit_map("affine", bad, x)
    with pytest.raises(BadInputError, match="labels"):
        fit_map("affine", x, x, labels=[0, 1])
    zero = x.copy()
    zero[5] = 0
    with pytest.raises(BadInputError, match="row 5 has zero norm"):
        fit_map("procrustes", zero, x)


def test_nothing_held_out_to_check_is_a_refusal():
    x = np.random.default_rng(0).standard_normal((6, 8))
    m = fit_map("affine", x, x, check=CheckConfig(val_fraction=0.1))
    assert m.refused is not None and "nothing to check" in m.refused
