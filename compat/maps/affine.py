"""``affine``: the ridge-regularised least-squares affine map, optionally of low rank.

For paired rows X (n, d_in), Y (n, d_out), centred on their means (X_c = X - mu_x,
Y_c = Y - mu_y), ridge regression (Hoerl and Kennard, Technometrics 1970) gives

    A = (X_c^T X_c + lambda I)^-1 X_c^T Y_c,   b = mu_y - mu_x A,                 (Eq. 1)

with lambda = ``ridge`` x tr(X_c^T X_c) / d_in, so the penalty is relative to the rows' own
variance and does not change with their scale or number. ``ridge: 0`` is ordinary least
squares (needs n > d_in). Drift-Adapter (Vejendla, EMNLP 2025, arXiv 2509.23471) fits such a
map, in low-rank form ("LA"), from new-model queries to the old space.

``rank`` r keeps the reduced-rank ridge solution (Mukherjee and Zhu, Stat. Anal. Data Min. 2011,
after Izenman's reduced-rank regression, J. Multivariate Anal. 1975):

    A_r = A V_r V_r^T,                                                              (Eq. 2)

where V_r holds the top r right singular vectors of the ridge fitted values of the augmented
problem, [X_c A; sqrt(lambda) A]. A_r has rank at most r; it is stored as the full
(d_in, d_out) matrix, so applying it costs what a full-rank map costs.

Fitting runs in float64 on the CPU (a d_in x d_in solve); the map is stored in float32
(:mod:`compat.maps.linear`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field

from compat.errors import BadInputError
from compat.maps.config import Params
from compat.maps.linear import LinearMap


class AffineParams(Params):
    """Parameters of an ``affine`` map."""

    ridge: float = Field(
        1e-3,
        ge=0,
        description="lambda relative to the mean variance per input dimension, "
        "tr(X_c^T X_c) / d_in (0: ordinary least squares)",
    )
    rank: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="keep the reduced-rank solution of this rank (default: full)",
    )


def fit_affine(
    x: np.ndarray, y: np.ndarray, *, ridge: float = 1e-3, rank: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(A (d_in, d_out), b (d_out,)) of the ridge affine map X -> Y (module docstring)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    d_in = x.shape[1]
    if rank is not None and not 1 <= rank <= min(d_in, y.shape[1]):
        raise BadInputError(f"map affine: rank: {rank} must lie in [1, {min(d_in, y.shape[1])}]")
    mx, my = x.mean(axis=0), y.mean(axis=0)
    xc, yc = x - mx, y - my
    gram = xc.T @ xc
    lam = ridge * float(np.trace(gram)) / d_in
    try:
        a = np.linalg.solve(gram + lam * np.eye(d_in), xc.T @ yc)  # Eq. (1)
    except np.linalg.LinAlgError:
        raise BadInputError(
            f"map affine: ridge: {ridge:g} leaves X^T X singular ({len(x)} pairs of {d_in} "
            "dims); raise ridge"
        ) from None
    if rank is not None:
        fitted = np.vstack([xc @ a, np.sqrt(lam) * a])
        _, _, vt = np.linalg.svd(fitted, full_matrices=False)
        vr = vt[:rank].T
        a = a @ vr @ vr.T  # Eq. (2)
    return a, my - mx @ a


def fit(
    x: np.ndarray,
    y: np.ndarray,
    params: AffineParams,
    *,
    labels: Sequence[Any] | None = None,
    seed: int = 0,
) -> LinearMap:
    """The fitted map (labels and seed play no part: the fit is closed form)."""
    del labels, seed
    return LinearMap(*fit_affine(x, y, ridge=params.ridge, rank=params.rank))


def from_state(
    state: dict[str, Any], in_dim: int, out_dim: int, params: dict[str, Any], device: str
) -> LinearMap:
    """The map of saved tensors."""
    del params
    return LinearMap.from_state(state, in_dim, out_dim, device)


__all__ = ["AffineParams", "fit", "fit_affine", "from_state"]
