"""``procrustes``: the (semi-)orthogonal map closest to the pairs, in closed form.

Orthogonal Procrustes (Schoenemann, Psychometrika 1966): for paired rows X (n, d_in) and
Y (n, d_out), the W with orthonormal columns (or rows) maximising tr(W^T X^T Y), i.e. the summed
inner products <x_i W, y_i> that cosine retrieval reads, is

    X^T Y = U S V^T (thin SVD of the cross-covariance),   W = U V^T.          (Eq. 1)

For d_in = d_out this is the least-squares rotation argmin ||X W - Y||_F. For two widths it is
the semi-orthogonal solution: d_in < d_out gives W W^T = I (an isometric embedding, still the
least-squares one), d_in > d_out gives W^T W = I (an orthogonal projection onto d_out directions
followed by a rotation; new 256 -> old 128). Drift-Adapter (Vejendla, EMNLP 2025, arXiv
2509.23471) fits this map from new-model queries to the old space ("OP" adapter).

``scaling`` fits the similarity transform instead (Schoenemann and Carroll 1970; Umeyama, TPAMI
1991, Eq. 40-42): both sides centred on their means mu_x, mu_y, W from Eq. 1 on the centred
rows, one global scale s = tr(S) / ||X_c W||_F^2 (Umeyama's tr(S) / ||X_c||_F^2 when W is
square) and b = mu_y - s mu_x W. Without ``scaling`` there is no translation, so the scale is
irrelevant after the output's L2 normalisation and is left at 1.

Fitting runs in float64 on the CPU; the map is stored in float32 (:mod:`compat.maps.linear`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field

from compat.maps.config import Params
from compat.maps.linear import LinearMap


class ProcrustesParams(Params):
    """Parameters of a ``procrustes`` map."""

    scaling: bool = Field(
        False,
        description="centre both sides and fit one global scale and a translation (Umeyama's "
        "similarity transform); default: a pure (semi-)orthogonal map",
    )


def fit_procrustes(
    x: np.ndarray, y: np.ndarray, *, scaling: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(W (d_in, d_out), b (d_out,)) of the Procrustes map X -> Y (module docstring, Eq. 1)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    mx = x.mean(axis=0) if scaling else np.zeros(x.shape[1])
    my = y.mean(axis=0) if scaling else np.zeros(y.shape[1])
    xc, yc = x - mx, y - my
    u, s, vt = np.linalg.svd(xc.T @ yc, full_matrices=False)
    w = u @ vt  # Eq. (1)
    if scaling:
        w = w * (s.sum() / max(float(((xc @ w) ** 2).sum()), 1e-300))  # Umeyama Eq. (42)
    return w, my - mx @ w


def fit(
    x: np.ndarray,
    y: np.ndarray,
    params: ProcrustesParams,
    *,
    labels: Sequence[Any] | None = None,
    seed: int = 0,
) -> LinearMap:
    """The fitted map (labels and seed play no part: the fit is closed form)."""
    del labels, seed
    return LinearMap(*fit_procrustes(x, y, scaling=params.scaling))


def from_state(
    state: dict[str, Any], in_dim: int, out_dim: int, params: dict[str, Any], device: str
) -> LinearMap:
    """The map of saved tensors."""
    del params
    return LinearMap.from_state(state, in_dim, out_dim, device)


__all__ = ["ProcrustesParams", "fit", "fit_procrustes", "from_state"]
