"""bct: the influence loss of BCT (Shen et al., CVPR 2020, "Towards Backward-Compatible
Representation Learning", Eq. 8), with compat's feature-alignment term (BCT's Eq. 3):

    L = L_head(phi_new; w_new) + lambda * L_head_old(phi_new; w_old)
        + l2 * 0.5 * ||n(phi_new(x)) - n(phi_old(x))||^2,              w_old frozen, n = L2-norm.

``l2 = 0`` is the paper's BCT: only the parent's classifier weights take part and the parent
backbone never runs per batch. The influence term constrains the new embedding only along the
old classifier's rows, i.e. on the training classes; on a strong old model trained on few
classes the new queries drifted away from the old gallery on unseen classes, and BCT's criterion
failed (docs/findings.md, "BCT on a strong old model"). The alignment term pulls each new
embedding towards the parent's embedding of the same augmented image, whatever its class;
compat's default weight (3) was chosen on validation classes there. It costs one frozen parent
forward per batch.

The parent also runs once, on un-augmented images of the classes it never saw, when
``new_classes="synthesize"`` (BCT's "sys": old weights synthesized as class means of parent
embeddings); ``new_classes="drop"`` leaves those samples out of the influence term. When the dims
differ, ``dim_mismatch="truncate"`` feeds the first d_old coordinates of the new embedding to
w_old (BCT); ``"pad"`` zero-pads the narrower side; the alignment term follows the same rule.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field

from compat.functional.regression import l2 as l2_regression
from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step
from compat.losses.old_classifier import OldClassifier, Synthesis


class BCTParams(MethodParams):
    lam: float = 1.0
    l2: float = Field(
        3.0,
        ge=0,
        description="weight of the feature-alignment term (BCT Eq. 3 on L2-normalised "
        "embeddings) added to Eq. 8; 0 is the paper's BCT (docs/reference.md, bct)",
    )
    new_classes: Literal["synthesize", "drop"] = "synthesize"
    synthesis: Synthesis = "normalised"
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


class BCT(CompatLoss):
    name = "bct"
    Params = BCTParams
    needs_parent_head = True
    fine_tune_by_default = True  # init: auto starts from the parent (docs/findings.md)

    def __init__(self, params: BCTParams) -> None:
        super().__init__(params)
        self.old = OldClassifier(params.new_classes, params.dim_mismatch, params.synthesis)

    # The parent backbone runs per batch only for the alignment term.
    @property
    def needs_parent_forward(self) -> bool:  # type: ignore[override]
        return self.params.l2 > 0

    def prepare(self, ctx: MethodContext) -> None:
        self.old.build(ctx)

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        p = self.params
        influence = self.old.influence(step.new, step.targets)
        out = {"head": step.head_loss, "influence": p.lam * influence}  # Eq. (8)
        if p.l2 > 0:
            assert step.old is not None, "bct's l2 term needs the parent's embeddings of the batch"
            out["l2"] = p.l2 * l2_regression(  # Eq. (3), normalised
                step.new, step.old, normalize=True, dim_mismatch=p.dim_mismatch
            )
        return out

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["method_params"]["synthesized_classes"] = self.old.num_synthesized
        return out
