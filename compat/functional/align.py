"""Making a new embedding meet an old one of another width (BCT, Sec. 3: the new model's first
d_old coordinates face the old model)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compat.errors import BadInputError


def fit_width(x: torch.Tensor, k: int) -> torch.Tensor:
    """``x`` cut to its first ``k`` coordinates, or zero-padded to ``k``."""
    d = x.shape[-1]
    return x[..., :k] if k <= d else F.pad(x, (0, k - d))


def align_dims(
    a: torch.Tensor, b: torch.Tensor, mode: str = "truncate"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Make the last dims of ``a`` (new) and ``b`` (old) equal.

    ``truncate`` keeps the first min(d_a, d_b) coordinates of both (BCT feeds the first d_old
    coordinates of the new embedding to the old classifier); ``pad`` zero-pads the narrower one.
    """
    da, db = a.shape[-1], b.shape[-1]
    if da == db:
        return a, b
    if mode == "truncate":
        k = min(da, db)
        return a[..., :k], b[..., :k]
    if mode == "pad":
        k = max(da, db)
        return F.pad(a, (0, k - da)), F.pad(b, (0, k - db))
    raise BadInputError(f"dim_mismatch: unknown {mode!r}; known: truncate, pad")
