"""lwf: Learning without Forgetting (Li & Hoiem, ECCV 2016 / TPAMI 2018).

The new model keeps a *trainable* copy of the parent's classifier (LwF's theta_o); the frozen
parent (backbone + classifier) gives soft labels y_o for each augmented training image, and the
copy's outputs on the new embedding are pulled towards them with the temperature-T distillation
loss (LwF uses T = 2):

    L = L_head(phi_new; w_new) + lambda * T^2 * KL( softmax(y_o / T) || softmax(theta_o phi_new / T) ).

LwF fine-tunes the old network, so ``init_from_parent=True`` (default) starts the new model from
the parent's weights; that needs the same backbone, pooling and dim. LwF writes the old-task loss
as a cross-entropy with soft targets; the KL form differs by the teacher's entropy, a constant,
so the gradients are the same. Without ``init_from_parent`` and with other dims, the first
min(d_new, d_old) coordinates of the new embedding feed the copy (zero-padded when narrower).
"""

from __future__ import annotations

import copy

import torch

from compat.errors import BadInputError
from compat.functional.distill import kd
from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step, fit_width
from compat.models.card import ModelCard
from compat.models.heads import Head


class LwFParams(MethodParams):
    lam: float = 1.0
    temperature: float = 2.0
    init_from_parent: bool = True


class LwF(CompatLoss):
    name = "lwf"
    Params = LwFParams
    needs_parent_forward = True
    needs_parent_head = True

    def __init__(self, params: LwFParams) -> None:
        super().__init__(params)
        self.init_from_parent = params.init_from_parent
        self.old_head: Head | None = None  # trainable copy, created in prepare
        self.teacher: Head | None = None  # the parent's classifier, frozen

    def check(self, parent_card: ModelCard | None, *, head: str, dim: int) -> None:
        super().check(parent_card, head=head, dim=dim)
        if parent_card is not None and self.init_from_parent and parent_card.dim != dim:
            raise BadInputError(
                f"method lwf: init_from_parent needs the parent's dim ({parent_card.dim}), "
                f"got dim {dim}; set method_params.init_from_parent: false to train from scratch"
            )

    def prepare(self, ctx: MethodContext) -> None:
        assert ctx.parent is not None and ctx.parent.head is not None
        head = copy.deepcopy(ctx.parent.head).train()
        self.old_head = head.requires_grad_(True).to(ctx.device)
        self.teacher = ctx.parent.head.frozen_copy().to(ctx.device)

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        assert step.old is not None and self.old_head is not None
        assert self.teacher is not None
        teacher = self.teacher(step.old)
        new = fit_width(step.new, self.old_head.dim)
        distil = kd(self.old_head(new), teacher, self.params.temperature)
        return {"head": step.head_loss, "lwf": self.params.lam * distil}
