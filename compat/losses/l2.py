"""l2: L = L_head(phi_new) + lambda * 0.5 * ||phi_new(x) - phi_old(x)||^2 (BCT, Eq. 3).

The regression baseline of BCT Table 1: it pulls each new embedding onto the parent's embedding
of the same augmented image, and is expected to be weak (BCT README: 13.0 vs 39.5 cross top-1).
``normalize=True`` (default) regresses L2-normalised embeddings, the form a retrieval system
compares; ``False`` regresses raw embeddings as written in the paper.

``on`` picks the images the term is applied to: ``all`` (default) every image of the new
training set; ``old-classes`` only images of classes the parent was trained on, as BCT's Eq. 3
sums over the old training set T_old (the paper's form); a batch with none of them adds 0.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from compat.functional.regression import l2
from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step


class L2Params(MethodParams):
    lam: float = 1.0
    normalize: bool = True
    on: Literal["all", "old-classes"] = Field(
        "all",
        description="the images the term regresses: 'all' of the new training set (default) or "
        "'old-classes', those of classes the parent was trained on (BCT Eq. 3's T_old)",
    )
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


class L2(CompatLoss):
    name = "l2"
    Params = L2Params
    needs_parent_forward = True

    def __init__(self, params: L2Params) -> None:
        super().__init__(params)
        self.register_buffer("seen", torch.empty(0, dtype=torch.bool), persistent=False)

    def prepare(self, ctx: MethodContext) -> None:
        if self.params.on == "old-classes":
            assert ctx.parent is not None, "l2 needs a parent"
            known = set(ctx.parent.classes)
            self.seen = torch.tensor([c in known for c in ctx.classes], device=ctx.device)

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        p = self.params
        assert step.old is not None, "l2 needs the parent's embeddings of the batch"
        new, old = step.new, step.old
        if p.on == "old-classes":
            keep = self.seen[step.targets]
            if not bool(keep.any()):  # nothing of T_old in this batch: the term adds 0
                return {"head": step.head_loss, "l2": new.sum() * 0.0}
            new, old = new[keep], old[keep]
        reg = l2(new, old, normalize=p.normalize, dim_mismatch=p.dim_mismatch)  # Eq. 3
        return {"head": step.head_loss, "l2": p.lam * reg}
