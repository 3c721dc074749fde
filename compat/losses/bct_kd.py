"""bct-kd: BCT's knowledge-distillation influence term (Shen et al., CVPR 2020, the "kd" variant):

    L = L_head(phi_new; w_new) + lambda * T^2 * KL( softmax(w_old phi_old(x) / T)
                                                   || softmax(w_old phi_new(x) / T) ).

Both distributions come from the parent's frozen classifier without margins (plain logits); the
parent backbone runs on the same augmented batch under inference mode. Unlike the classification
form it needs no label in the old label space, so samples of new classes take part as well.
``new_classes="synthesize"`` extends w_old with synthesized rows (as bct), ``"old-only"`` keeps the
parent's classes only. The T^2 factor keeps gradient magnitudes independent of T (Hinton et al.).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step
from compat.losses.old_classifier import OldClassifier


class BCTKDParams(MethodParams):
    lam: float = 1.0
    temperature: float = 1.0
    new_classes: Literal["synthesize", "old-only"] = "old-only"
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, t: float) -> torch.Tensor:
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)), averaged over the batch."""
    log_p_student = F.log_softmax(student_logits / t, dim=1)
    log_p_teacher = F.log_softmax(teacher_logits / t, dim=1)
    return F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True) * t * t


class BCTKD(CompatLoss):
    name = "bct-kd"
    Params = BCTKDParams
    needs_parent_forward = True
    needs_parent_head = True

    def __init__(self, params: BCTKDParams) -> None:
        super().__init__(params)
        new_classes = "synthesize" if params.new_classes == "synthesize" else "drop"
        self.old = OldClassifier(new_classes, params.dim_mismatch)

    def prepare(self, ctx: MethodContext) -> None:
        self.old.build(ctx)

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        assert step.old is not None and self.old.head is not None and self.old.teacher is not None
        teacher = self.old.teacher(step.old)
        student = self.old.head(self.old.align(step.new))
        kd = kd_loss(student, teacher, self.params.temperature)
        return {"head": step.head_loss, "kd": self.params.lam * kd}
