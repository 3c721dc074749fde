"""l2: L = L_head(phi_new) + lambda * 0.5 * ||phi_new(x) - phi_old(x)||^2 (BCT, Eq. 3).

The regression baseline of BCT Table 1: it pulls each new embedding onto the parent's embedding
of the same augmented image, and is expected to be weak (BCT README: 13.0 vs 39.5 cross top-1).
``normalize=True`` (default) regresses L2-normalised embeddings, the form a retrieval system
compares; ``False`` regresses raw embeddings as written in the paper.
"""

from __future__ import annotations

from typing import Literal

import torch

from compat.functional.regression import l2
from compat.losses.base import CompatLoss, MethodParams, Step


class L2Params(MethodParams):
    lam: float = 1.0
    normalize: bool = True
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


class L2(CompatLoss):
    name = "l2"
    Params = L2Params
    needs_parent_forward = True

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        p = self.params
        assert step.old is not None, "l2 needs the parent's embeddings of the batch"
        reg = l2(step.new, step.old, normalize=p.normalize, dim_mismatch=p.dim_mismatch)  # Eq. 3
        return {"head": step.head_loss, "l2": p.lam * reg}
