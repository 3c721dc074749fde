"""Synthetic paired embeddings for the map tests, and one torch thread (2 shared cores)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def random_orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def drifted_pairs(
    n: int = 1200,
    d_new: int = 32,
    d_old: int = 32,
    classes: int = 60,
    seed: int = 0,
    old_noise: float = 0.9,
    new_noise: float = 0.3,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(new, old, labels, M) where both models see latent class structure z: the old model as
    z + much noise (a weaker model), the new one as (z + less noise) rotated into its own
    space of width d_new. M (d_new, d_old) is the true new -> old map (a rotation's inverse, or
    a semi-orthogonal one between two widths)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centers = rng.standard_normal((classes, d_old))
    z = centers[labels]
    old = unit(z + old_noise * rng.standard_normal((n, d_old)))
    q = random_orthogonal(rng, d_new)[:, :d_old] if d_new >= d_old else None
    if q is None:
        q = random_orthogonal(rng, d_old)[:d_new, :]  # (d_new, d_old), orthonormal rows
    clean = z + new_noise * rng.standard_normal((n, d_old))
    new = unit(clean @ q.T)  # new = clean Q^T, so clean ~ new Q: M = Q
    return new, old, labels, q


def write_npz(path: Path, emb, labels=None, ids=None) -> str:
    """An embeddings file as ``compat`` commands read it (float32 ``embeddings``, and ``labels``
    and string ``ids`` when given); returns its path as a string."""
    arrays = {"embeddings": np.asarray(emb, np.float32)}
    if labels is not None:
        arrays["labels"] = np.asarray(labels)
    if ids is not None:
        arrays["ids"] = np.asarray(ids, dtype=np.str_)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return str(path)
