"""bct: the influence loss of BCT (Shen et al., CVPR 2020, "Towards Backward-Compatible
Representation Learning", Eq. 8):

    L = L_head(phi_new; w_new) + lambda * L_head_old(phi_new; w_old),   w_old frozen.

Only the parent's classifier weights take part: the parent backbone never runs during training
(``needs_parent_forward = False``). It runs once, on un-augmented images of the classes the parent
never saw, when ``new_classes="synthesize"`` (BCT's "sys" variant: old weights synthesized as class
means of parent embeddings); ``new_classes="drop"`` leaves those samples out of the influence term
and never runs the parent. When the dims differ, ``dim_mismatch="truncate"`` feeds the first
d_old coordinates of the new embedding to w_old (BCT); ``"pad"`` zero-pads the narrower side.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step
from compat.losses.old_classifier import OldClassifier


class BCTParams(MethodParams):
    lam: float = 1.0
    new_classes: Literal["synthesize", "drop"] = "synthesize"
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


class BCT(CompatLoss):
    name = "bct"
    Params = BCTParams
    needs_parent_head = True
    fine_tune_by_default = True  # init: auto starts from the parent (docs/findings.md)

    def __init__(self, params: BCTParams) -> None:
        super().__init__(params)
        self.old = OldClassifier(params.new_classes, params.dim_mismatch)

    def prepare(self, ctx: MethodContext) -> None:
        self.old.build(ctx)

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        influence = self.old.influence(step.new, step.targets)
        return {"head": step.head_loss, "influence": self.params.lam * influence}  # Eq. (8)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["method_params"]["synthesized_classes"] = self.old.num_synthesized
        return out
