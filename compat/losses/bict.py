"""bict: the backward term of Bidirectional Compatible Training (Su et al., "Privacy-Preserving
Model Upgrades with Bidirectional Compatible Training in Image Retrieval").

BiCT first trains phi_new with a backward-compatibility term, then (its forward step, a separate
stage: the upgrade module) trains psi so that psi(phi_old(x)) matches phi_new(x). This module is
the backward term; its forms:

- ``regression`` (default, BiCT's main form): L = L_head + lambda * mean 0.5 ||phi_new(x) -
  phi_old(x)||^2 on the same augmented image (BCT Eq. 3's regression; L2-normalised embeddings by
  default, ``normalize``), so phi_new stays near phi_old point by point; the parent backbone runs
  per batch. :func:`compat.functional.l2`.
- ``classification``: BCT's influence loss against the parent's frozen classifier,
  L = L_head + lambda * L_head_old(phi_new; w_old)  (BCT Eq. 8); new classes synthesized or
  dropped. :func:`compat.functional.bct_influence`.
- ``cosine``: L = L_head + lambda * mean(1 - cos(phi_new(x), phi_old(x))), which equals the
  regression form on normalised embeddings (0.5 ||a - b||^2 = 1 - cos for unit vectors).

BiCT's finding is that lambda matters: M(new, old) peaks at an intermediate lambda, and a smaller
lambda leaves more room for the forward upgrade; sweep ``lam``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from compat.functional.regression import l2
from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step
from compat.losses.old_classifier import OldClassifier, Synthesis


class BiCTParams(MethodParams):
    lam: float = 1.0
    form: Literal["regression", "classification", "cosine"] = "regression"
    normalize: bool = True  # regression form: regress L2-normalised embeddings
    new_classes: Literal["synthesize", "drop"] = "synthesize"  # classification form
    synthesis: Synthesis = "normalised"
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


class BiCT(CompatLoss):
    name = "bict"
    Params = BiCTParams

    def __init__(self, params: BiCTParams) -> None:
        super().__init__(params)
        self.old: OldClassifier | None = None
        if params.form == "classification":
            self.old = OldClassifier(params.new_classes, params.dim_mismatch, params.synthesis)

    # Which parent parts are needed depends on the form, so these are per instance.
    @property
    def needs_parent_forward(self) -> bool:  # type: ignore[override]
        return self.params.form != "classification"

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
            assert step.old is not None, f"bict ({p.form}) needs the parent's embeddings"
            normalize = p.normalize or p.form == "cosine"
            # On unit vectors 0.5 ||a - b||^2 = 1 - cos(a, b): the cosine form.
            backward = l2(step.new, step.old, normalize=normalize, dim_mismatch=p.dim_mismatch)
        return {"head": step.head_loss, "backward": p.lam * backward}

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if self.old is not None:
            out["method_params"]["synthesized_classes"] = self.old.num_synthesized
        return out
