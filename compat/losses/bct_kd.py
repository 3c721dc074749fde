"""bct-kd: BCT with knowledge distillation for the new classes (Shen et al., CVPR 2020, "Towards
Backward-Compatible Representation Learning", Sec. 3.3):

    L = L_head(phi_new; w_new) + lambda * mean_i l_i,
    l_i = CE(w_old phi_new(x_i), y_i)                                   if y_i is an old class,
    l_i = T^2 KL( softmax(w_old phi_old(x_i) / T) || softmax(w_old phi_new(x_i) / T) )  otherwise.

Samples of classes the parent was trained on take the influence loss of Eq. (8) through the
parent's frozen classifier (its margin rule kept); samples of new classes, which have no row in
w_old, are distilled on the old classifier's softmax instead, with the parent's embedding of the
same augmented image as the teacher (the parent backbone runs per batch). The KD logits are plain
(no margin). ``new_classes="synthesize"`` first extends w_old with synthesized rows (bct's
"sys"), so the distilled softmax also covers them; ``"old-only"`` (default) keeps the parent's
classes only. The T^2 factor keeps gradient magnitudes independent of T (Hinton et al.).
See :func:`compat.functional.bct_kd`.
"""

from __future__ import annotations

from typing import Literal

import torch

from compat.functional.influence import bct_kd
from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step
from compat.losses.old_classifier import OldClassifier, Synthesis


class BCTKDParams(MethodParams):
    lam: float = 1.0
    temperature: float = 1.0
    new_classes: Literal["synthesize", "old-only"] = "old-only"
    synthesis: Synthesis = "normalised"
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


class BCTKD(CompatLoss):
    name = "bct-kd"
    Params = BCTKDParams
    needs_parent_forward = True
    needs_parent_head = True
    fine_tune_by_default = True  # init: auto starts from the parent (docs/findings.md)

    def __init__(self, params: BCTKDParams) -> None:
        super().__init__(params)
        new_classes = "synthesize" if params.new_classes == "synthesize" else "drop"
        self.old = OldClassifier(new_classes, params.dim_mismatch, params.synthesis)

    def prepare(self, ctx: MethodContext) -> None:
        self.old.build(ctx)

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        assert step.old is not None and self.old.head is not None and self.old.teacher is not None
        loss = bct_kd(
            step.new,
            None,
            self.old.old_index[step.targets],
            self.old.head,
            temperature=self.params.temperature,
            old_classes=self.old.num_parent,
            teacher_logits=self.old.teacher(step.old),
        )
        return {"head": step.head_loss, "kd": self.params.lam * loss}
