"""l2: L = L_head(phi_new) + lambda * 0.5 * ||phi_new(x) - phi_old(x)||^2 (BCT, Eq. 3).

The regression baseline of BCT Table 1: it pulls each new embedding onto the parent's embedding
of the same augmented image, and is expected to be weak (BCT README: 13.0 vs 39.5 cross top-1).
``normalize=True`` (default) regresses L2-normalised embeddings, the form a retrieval system
compares; ``False`` regresses raw embeddings as written in the paper.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from compat.losses.base import CompatLoss, MethodParams, Step, align_dims


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
        new, old = align_dims(step.new.float(), step.old.float(), p.dim_mismatch)
        if p.normalize:
            new, old = F.normalize(new, dim=1), F.normalize(old, dim=1)
        reg = 0.5 * (new - old).pow(2).sum(dim=1).mean()  # Eq. (3)
        return {"head": step.head_loss, "l2": p.lam * reg}
