"""bict: the backward term of Bidirectional Compatible Training (Su et al., "Privacy-Preserving
Model Upgrades with Bidirectional Compatible Training in Image Retrieval").

BiCT first trains phi_new with a BCT-style backward-compatibility term, then (its forward step,
a separate stage: the upgrade module) trains psi so that psi(phi_old(x)) matches phi_new(x). This
module is the backward term; two forms are offered:

- ``classification`` (default): BCT's influence loss against the parent's frozen classifier,
  L = L_head + lambda * L_head_old(phi_new; w_old)  (BCT Eq. 8); new classes synthesized or dropped.
- ``cosine``: cosine regression onto the parent's embedding of the same augmented image,
  L = L_head + lambda * mean(1 - cos(phi_new(x), phi_old(x))); the parent backbone runs per batch.

BiCT's finding is that lambda matters: M(new, old) peaks at an intermediate lambda, and a smaller
lambda leaves more room for the forward upgrade; sweep ``lam``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F

from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step, align_dims
from compat.losses.old_classifier import OldClassifier


class BiCTParams(MethodParams):
    lam: float = 1.0
    form: Literal["classification", "cosine"] = "classification"
    new_classes: Literal["synthesize", "drop"] = "synthesize"
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


class BiCT(CompatLoss):
    name = "bict"
    Params = BiCTParams

    def __init__(self, params: BiCTParams) -> None:
        super().__init__(params)
        self.old: OldClassifier | None = None
        if params.form == "classification":
            self.old = OldClassifier(params.new_classes, params.dim_mismatch)

    # Which parent parts are needed depends on the form, so these are per instance.
    @property
    def needs_parent_forward(self) -> bool:  # type: ignore[override]
        return self.params.form == "cosine"

    @property
    def needs_parent_head(self) -> bool:  # type: ignore[override]
        return self.params.form == "classification"

    def prepare(self, ctx: MethodContext) -> None:
        if self.old is not None:
            self.old.build(ctx)

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        p = self.params
        if self.old is not None:
            backward = self.old.influence(step.new, step.targets)  # BCT Eq. (8)
        else:
            assert step.old is not None, "bict (cosine) needs the parent's embeddings of the batch"
            new, old = align_dims(step.new.float(), step.old.float(), p.dim_mismatch)
            backward = (1.0 - F.cosine_similarity(new, old, dim=1)).mean()
        return {"head": step.head_loss, "backward": p.lam * backward}

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if self.old is not None:
            out["method_params"]["synthesized_classes"] = self.old.num_synthesized
        return out
