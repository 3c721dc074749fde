"""L2-normalising rows read from files, safely at any finite scale.

A float32 row scaled by 1e20 is finite, but the sum of its squares (1e40) is not: a plain
``x / ||x||`` turns it into zeros (``x / inf``), and a row scaled by 1e-30 loses its norm to
underflow. Such rows are brought to unit length here by first dividing them by their largest
absolute value, which leaves their direction unchanged. Every other row is normalised exactly
as ``x / ||x||`` would (the same bits), so nothing computed from ordinary rows changes.

:func:`l2_normalize_rows` is the rule in numpy (files, the CLI); :func:`normalize_rows` the same
rule in torch, for every map between spaces (psi and the kinds of :mod:`compat.maps`). torch is
imported inside it, so this module stays torch-free for its numpy readers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

# Below this norm the squares of a float32 row's entries approach the subnormal range (1e-38)
# and lose precision; above the float32 maximum they overflow. Rows outside are rescaled first.
TINY_NORM = 1e-15


def unsafe_rows(norms: np.ndarray) -> np.ndarray:
    """Which rows' plain norms cannot be trusted: not finite (overflow) or below
    :data:`TINY_NORM` (underflow; a zero row is included, its caller decides)."""
    return ~np.isfinite(norms) | (norms < TINY_NORM)


def l2_normalize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows of x at unit length, indices of the all-zero rows)``, float32; an all-zero row
    stays zero (the caller decides whether that is an error). Rows that are not finite are the
    caller's to refuse beforehand (every reader of compat does)."""
    x = np.asarray(x)
    with np.errstate(over="ignore", under="ignore"):
        norms = np.linalg.norm(x, axis=1, keepdims=True)
    bad = unsafe_rows(norms[:, 0])
    out = (x / np.where(bad[:, None], 1.0, norms)).astype(np.float32, copy=False)
    zeros = np.zeros(0, dtype=np.int64)
    if bad.any():
        rows = np.flatnonzero(bad)
        sub = np.asarray(x[rows], dtype=np.float64)
        peak = np.abs(sub).max(axis=1, keepdims=True)
        nonzero = peak[:, 0] > 0
        zeros = rows[~nonzero]
        scaled = sub[nonzero] / peak[nonzero]  # the largest entry is now 1: no overflow
        fixed = np.zeros_like(sub)
        fixed[nonzero] = scaled / np.linalg.norm(scaled, axis=1, keepdims=True)
        out[rows] = fixed.astype(np.float32)
    return out, zeros


def normalize_rows(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """``F.normalize(x, dim=1)`` (the same operations, so the same bits) for ordinary rows;
    a row whose norm overflows float32 (entries near 1e20) or underflows (near 1e-30) is
    divided by its largest absolute value first, so it too reaches unit length instead of
    zeros. An all-zero row stays zero."""
    import torch
    import torch.nn.functional as F

    norms = x.norm(2, 1, keepdim=True)
    out = x / norms.clamp_min(eps).expand_as(x)
    bad = ~torch.isfinite(norms[:, 0]) | (norms[:, 0] < TINY_NORM)
    if bool(bad.any()):
        rows = x[bad].double()
        peak = rows.abs().amax(dim=1, keepdim=True)
        scaled = rows / torch.where(peak > 0, peak, torch.ones_like(peak))
        out[bad] = F.normalize(scaled, dim=1).to(out.dtype)
    return out


FLOAT32_MAX = float(np.finfo(np.float32).max)


def largest_norm(x: np.ndarray) -> tuple[float, int]:
    """(the largest row norm of ``x``, computed in float64 so it cannot overflow; its row)."""
    if len(x) == 0:
        return 0.0, 0
    x64 = np.asarray(x, dtype=np.float64)
    peak = np.abs(x64).max(axis=1)
    safe = np.where(peak > 0, peak, 1.0)[:, None]
    norms = np.linalg.norm(x64 / safe, axis=1) * peak
    row = int(np.argmax(norms))
    return float(norms[row]), row


def products_overflow(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int, int] | None:
    """Whether a float32 inner product of a row of ``a`` with a row of ``b`` can overflow
    (the product of their largest norms exceeds float32's range): (norm a, norm b, row a,
    row b) when it can, else None. Scores that overflow to inf rank nothing."""
    na, ra = largest_norm(a)
    nb, rb = largest_norm(b)
    return (na, nb, ra, rb) if na * nb > FLOAT32_MAX else None


__all__ = [
    "FLOAT32_MAX",
    "TINY_NORM",
    "l2_normalize_rows",
    "largest_norm",
    "normalize_rows",
    "products_overflow",
    "unsafe_rows",
]
