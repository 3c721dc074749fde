"""Closed-form maps: Procrustes recovers a rotation and a semi-orthogonal map; affine recovers
an affine map; ridge shrinks; low rank has the rank asked for."""

from __future__ import annotations

import numpy as np
import pytest

from compat.errors import BadInputError
from compat.maps.affine import fit_affine
from compat.maps.procrustes import fit_procrustes
from tests.maps.conftest import random_orthogonal


def test_procrustes_recovers_a_rotation():
    rng = np.random.default_rng(0)
    r = random_orthogonal(rng, 32)
    x = rng.standard_normal((500, 32))
    w, b = fit_procrustes(x, x @ r + 0.01 * rng.standard_normal((500, 32)))
    assert np.allclose(w.T @ w, np.eye(32), atol=1e-10)  # orthogonal
    assert np.abs(w - r).max() < 0.01
    assert not b.any()


def test_procrustes_recovers_a_semi_orthogonal_map_between_two_widths():
    """new 256 -> old 128: W (256, 128) with orthonormal columns, the map that made the pairs."""
    rng = np.random.default_rng(1)
    p = random_orthogonal(rng, 256)[:, :128]
    x = rng.standard_normal((20_000, 256))
    w, _ = fit_procrustes(x, x @ p)
    assert w.shape == (256, 128)
    assert np.allclose(w.T @ w, np.eye(128), atol=1e-10)
    assert np.linalg.norm(w - p) / np.linalg.norm(p) < 0.1
    got, want = x[:1000] @ w, x[:1000] @ p
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.mean() > 0.99
    # narrow -> wide: orthonormal rows, the least-squares map, exact without noise
    q = random_orthogonal(rng, 128)[:64, :]
    w2, _ = fit_procrustes(x[:, :64], x[:, :64] @ q)
    assert np.allclose(w2 @ w2.T, np.eye(64), atol=1e-10)
    assert np.allclose(w2, q, atol=1e-8)


def test_procrustes_with_scaling_recovers_scale_and_translation():
    rng = np.random.default_rng(2)
    r = random_orthogonal(rng, 16)
    x = rng.standard_normal((400, 16)) + 3.0
    t = rng.standard_normal(16)
    w, b = fit_procrustes(x, 2.5 * x @ r + t, scaling=True)
    assert np.allclose(w, 2.5 * r, atol=1e-8)
    assert np.allclose(b, t, atol=1e-8)


def test_affine_recovers_a_known_affine_map():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((24, 16))
    t = rng.standard_normal(16)
    x = rng.standard_normal((300, 24))
    w, b = fit_affine(x, x @ a + t, ridge=0.0)
    assert np.allclose(w, a, atol=1e-8) and np.allclose(b, t, atol=1e-8)


def test_ridge_shrinks_the_map():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((200, 24))
    y = x @ rng.standard_normal((24, 16)) + rng.standard_normal((200, 16))
    norms = [np.linalg.norm(fit_affine(x, y, ridge=r)[0]) for r in (0.0, 0.1, 1.0, 10.0)]
    assert norms == sorted(norms, reverse=True) and norms[-1] < 0.2 * norms[0]


def test_low_rank_affine_has_the_rank_and_recovers_a_low_rank_map():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((32, 4)) @ rng.standard_normal((4, 24))  # rank 4
    x = rng.standard_normal((600, 32))
    y = x @ a + 0.01 * rng.standard_normal((600, 24))
    w, _ = fit_affine(x, y, ridge=0.0, rank=4)
    assert np.linalg.matrix_rank(w, tol=1e-6) == 4
    assert np.linalg.norm(w - a) / np.linalg.norm(a) < 0.01
    w2, _ = fit_affine(x, y, ridge=0.0, rank=2)
    assert np.linalg.matrix_rank(w2, tol=1e-6) == 2


@pytest.mark.parametrize("rank", [0, 17])
def test_a_rank_outside_the_widths_is_bad_input(rank):
    x = np.random.default_rng(0).standard_normal((50, 16))
    with pytest.raises(BadInputError, match="rank"):
        fit_affine(x, x, rank=rank)
