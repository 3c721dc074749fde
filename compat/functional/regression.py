"""Feature regression onto the old model's embedding of the same image (BCT Eq. 3, the l2
baseline; BiCT's regression form of the backward term)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compat.functional.align import align_dims


def l2(
    new: torch.Tensor,
    old: torch.Tensor,
    *,
    normalize: bool = True,
    dim_mismatch: str = "truncate",
) -> torch.Tensor:
    """mean_i 0.5 * ||new_i - old_i||^2 (BCT Eq. 3).

    ``normalize`` (default) regresses L2-normalised embeddings, the form retrieval compares; on
    unit vectors 0.5 ||a - b||^2 = 1 - cos(a, b). Widths that differ are aligned by
    ``dim_mismatch`` (``truncate`` or ``pad``).
    """
    new, old = align_dims(new.float(), old.float(), dim_mismatch)
    if normalize:
        new, old = F.normalize(new, dim=1), F.normalize(old, dim=1)
    return 0.5 * (new - old).pow(2).sum(dim=1).mean()
