"""contrastive: InfoNCE between the new and the parent's embeddings (UniBCT, IJCAI 2022, Eq. 12;
one positive per anchor, so not supervised-contrastive, which counts every same-class one):

    L_i = -log( exp(<n_i, o_i> / tau) / sum_{j : j = i or y_j != y_i} exp(<n_i, o_j> / tau) ),

anchor the new embedding n_i, positive the parent embedding o_i of the same augmented image,
negatives the parent embeddings o_j of other classes in the batch (features L2-normalised).
Same-class pairs j != i are masked out rather than counted as negatives: they are not wrong
matches. The parent backbone runs on the batch under inference mode.
"""

from __future__ import annotations

from typing import Literal

import torch

from compat.functional.contrastive import contrastive
from compat.losses.base import CompatLoss, MethodParams, Step


class ContrastiveParams(MethodParams):
    lam: float = 1.0
    tau: float = 0.1
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


class Contrastive(CompatLoss):
    name = "contrastive"
    Params = ContrastiveParams
    needs_parent_forward = True

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        assert step.old is not None, "contrastive needs the parent's embeddings of the batch"
        p = self.params
        nce = contrastive(step.new, step.old, step.targets, p.tau, dim_mismatch=p.dim_mismatch)
        return {"head": step.head_loss, "contrastive": p.lam * nce}
