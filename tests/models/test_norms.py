"""Rows read from files reach unit length at any finite scale (issue 30 item 8), and ordinary
rows keep the exact bits of the plain formula, wherever compat L2-normalises them: ``compat
score`` (compat.models.norms), the truncate of different widths (compat.embeddings.dims) and
psi's input and every map's (compat.models.norms.normalize_rows, the same rule in torch: every
backfill and forward evaluation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from compat.embeddings.dims import fit_dim
from compat.maps.psi import UpgradeModule, upgrade_array
from compat.models.norms import l2_normalize_rows, normalize_rows

SCALES = [1e20, 1e-30, 3e38 / 8, 1e-40]  # overflow, underflow, near float32's max, subnormal


def _rows(n: int = 64, d: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _unit(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_ordinary_rows_keep_the_bits_of_the_plain_formula():
    x = _rows(1000, 64) * np.random.default_rng(1).uniform(0.01, 100, (1000, 1)).astype("f4")
    out, zero = l2_normalize_rows(x)
    np.testing.assert_array_equal(out, (x / np.linalg.norm(x, axis=1, keepdims=True)))
    assert zero.size == 0
    t = torch.from_numpy(x)
    assert torch.equal(normalize_rows(t), F.normalize(t, dim=1))


@pytest.mark.parametrize("scale", SCALES)
def test_scaled_rows_reach_unit_length(scale):
    x = _rows()
    big = (x.astype(np.float64) * scale).astype(np.float32)
    assert np.isfinite(big).all() and (np.abs(big).max(axis=1) > 0).all()
    out, zero = l2_normalize_rows(big)
    assert zero.size == 0
    np.testing.assert_allclose(out, _unit(x), atol=1e-6 if scale > 1e-38 else 1e-2)
    t = normalize_rows(torch.from_numpy(big)).numpy()
    np.testing.assert_allclose(t, _unit(x), atol=1e-6 if scale > 1e-38 else 1e-2)
    cut = fit_dim(big, 4, "truncate")  # truncate, then L2-normalise
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-6)


def test_zero_rows_stay_zero_and_are_named():
    x = _rows(4)
    x[2] = 0
    out, zero = l2_normalize_rows(x)
    assert zero.tolist() == [2] and not out[2].any()
    assert not normalize_rows(torch.from_numpy(x))[2].any()


@pytest.mark.parametrize("scale", [1e20, 1e-30])
def test_psi_upgrades_a_scaled_row_like_the_row_itself(scale):
    torch.manual_seed(0)
    psi = UpgradeModule(8, 8, hidden=16).eval()
    with torch.no_grad():
        for p in psi.parameters():
            p.add_(0.1 * torch.randn_like(p))  # not the identity
    x = _rows(300)
    big = (x.astype(np.float64) * scale).astype(np.float32)
    want = upgrade_array(psi, _unit(x).astype(np.float32))
    np.testing.assert_allclose(upgrade_array(psi, big), want, atol=1e-5)
    got = psi.upgrade(torch.from_numpy(big)).detach().numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_products_that_overflow_float32_are_found():
    from compat.models.norms import largest_norm, products_overflow

    x = _rows(5)
    assert products_overflow(x, x) is None
    big = x.copy()
    big[3] *= np.float32(1e19)
    n, row = largest_norm(big)
    assert row == 3 and n == pytest.approx(np.linalg.norm(x[3].astype(np.float64)) * 1e19)
    assert products_overflow(big, x) is None  # 1e19 x 1: finite
    assert products_overflow(big, big)[2:] == (3, 3)
