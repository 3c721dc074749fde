"""How a query embedding meets a gallery embedding of another width (``dim_mismatch``).

BCT (Shen et al., CVPR 2020) trains a new model wider than the old one (128 -> 256 dims) by
feeding the first d_old coordinates of the new embedding to the old classifier; at test time
the same first d_old coordinates are what is compared with the old gallery. compat names the two
conventions its training losses already offer (``dim_mismatch`` of bct, l2, bict, ...):

- ``truncate`` (BCT): the wider side keeps its first min(d_q, d_g) coordinates, and is then
  L2-normalised again. The order matters: truncating a unit vector leaves a shorter vector, so
  cosine similarity needs the re-normalisation *after* the cut (truncate, then L2-normalise).
- ``pad``: the narrower side is zero-padded to max(d_q, d_g); its norm does not change, so a
  normalised row stays normalised and the scores equal the inner products with the wider
  side's first coordinates, unnormalised.

Equal widths are returned unchanged whatever the mode; different widths without a mode are an
error (there is no inner product to take).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from compat.models.norms import l2_normalize_rows

DimMismatch = Literal["truncate", "pad"]
DIM_MISMATCH: tuple[str, ...] = ("truncate", "pad")


def _l2(x: np.ndarray) -> np.ndarray:
    return l2_normalize_rows(x)[0]  # safe at any scale; a zero row stays zero


def fit_dim(x: np.ndarray, dim: int, mode: str, *, normalize: bool = True) -> np.ndarray:
    """``x`` (n, d) brought to width ``dim`` by ``mode``: truncated to its first ``dim``
    coordinates then (``normalize``) L2-normalised, or zero-padded to ``dim``."""
    if mode not in DIM_MISMATCH:
        raise ValueError(f"dim_mismatch: unknown {mode!r}; known: {', '.join(DIM_MISMATCH)}")
    d = x.shape[1]
    if d == dim:
        return x
    if d > dim:
        if mode != "truncate":
            raise ValueError(f"dim_mismatch pad widens rows; cannot bring {d} dims to {dim}")
        cut = np.ascontiguousarray(x[:, :dim])
        return _l2(cut) if normalize else cut
    if mode != "pad":
        raise ValueError(f"dim_mismatch truncate narrows rows; cannot bring {d} dims to {dim}")
    out = np.zeros((x.shape[0], dim), dtype=x.dtype)
    out[:, :d] = x
    return out


def align_pair(
    query: np.ndarray,
    gallery: np.ndarray,
    mode: str | None,
    *,
    normalize: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(query, gallery) at one width: ``truncate`` cuts the wider side to the narrower width
    (then L2-normalises it when ``normalize``), ``pad`` zero-pads the narrower side.

    ValueError when the widths differ and ``mode`` is None or unknown."""
    dq, dg = query.shape[1], gallery.shape[1]
    if dq == dg:
        return query, gallery
    if mode is None:
        raise ValueError(
            f"dimensions differ ({dq} vs {dg}) and no dim_mismatch (truncate or pad) is given"
        )
    width = min(dq, dg) if mode == "truncate" else max(dq, dg)
    return (
        fit_dim(query, width, mode, normalize=normalize),
        fit_dim(gallery, width, mode, normalize=normalize),
    )


__all__ = ["DIM_MISMATCH", "DimMismatch", "align_pair", "fit_dim"]
