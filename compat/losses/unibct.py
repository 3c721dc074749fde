"""unibct: Universal Backward-Compatible Training (Zhang et al., IJCAI 2022, "Towards Universal
Backward-Compatible Representation Learning").

The influence term is an ArcFace-form loss of the new embedding against *pseudo prototypes*, one
per class of the new training set, built from the parent's embeddings of that set (so it works
whether or not the parent saw the class: open-data and open-class scenarios):

- ``vanilla``: the prototype is the normalised class mean of the parent's normalised embeddings.
- ``refined`` (structural prototype refinement; docs/reference.md): per class, with F the new model's
  normalised features of its m samples and V0 their parent features, A = F F^T / tau with the
  diagonal masked, E = row-softmax(A) (each node's transition probabilities sum to one), and

      V_inf = (1 - lambda_r) (I - lambda_r E)^-1 V0,

  the fixed point of V <- lambda_r E V + (1 - lambda_r) V0; the prototype is the mean row of
  V_inf. Outlying parent embeddings, poorly connected in the new model's graph, weigh less.

Prototypes are rebuilt at the start of the epochs in ``refresh_at`` (MixBCT refreshes at epochs
10 and 20 of 35; the default scales those to the run's length). Before the new model has trained
(epoch 0) its features carry no information, so the parent's own features stand in for F.

    L = L_head(phi_new; w_new) + lambda * ArcFace(phi_new; prototypes, s, m).
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from compat.functional.prototypes import (
    refine_closed_form,
    refined_prototypes,
    unibct_prototypes,
)
from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step, fit_width
from compat.models.heads import ArcFace
from compat.models.parent import embed_images


class UniBCTParams(MethodParams):
    lam: float = 1.0
    prototypes: Literal["vanilla", "refined"] = "refined"
    lambda_r: float = 0.9
    tau: float = 0.05
    # UniBCT trains with s=64, m=0.5; these match the short-schedule CPU defaults (docs/findings.md).
    s: float = 16.0
    m: float = 0.2
    refresh_at: list[Annotated[int, Field(ge=0, le=100_000)]] | None = None
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


class UniBCT(CompatLoss):
    name = "unibct"
    Params = UniBCTParams

    def __init__(self, params: UniBCTParams) -> None:
        super().__init__(params)
        self.arc: nn.Module | None = None  # frozen ArcFace whose weights are the prototypes
        self.refresh_epochs: list[int] = []

    def _refresh_schedule(self, epochs: int) -> list[int]:
        if self.params.prototypes == "vanilla":
            return []  # vanilla prototypes depend on the parent only
        if self.params.refresh_at is not None:
            return sorted(set(self.params.refresh_at))
        return sorted({round(epochs * f) for f in (10 / 35, 20 / 35)} - {0} - {epochs})

    def build_prototypes(self, ctx: MethodContext, new_feats: torch.Tensor | None) -> torch.Tensor:
        assert ctx.parent is not None
        old = ctx.parent.features(ctx.images, key="train", batch_size=ctx.embed_batch_size).cpu()
        p = self.params
        return unibct_prototypes(
            old,
            ctx.targets.cpu(),
            len(ctx.classes),
            new=None if new_feats is None else new_feats.cpu(),
            refine=p.prototypes == "refined",
            lambda_r=p.lambda_r,
            tau=p.tau,
        )

    def prepare(self, ctx: MethodContext) -> None:
        self.refresh_epochs = self._refresh_schedule(ctx.epochs)
        protos = self.build_prototypes(ctx, None).to(ctx.device)
        d = min(ctx.dim, protos.shape[1])
        if self.params.dim_mismatch == "pad":
            d = max(ctx.dim, protos.shape[1])
        arc = ArcFace(d, len(ctx.classes), s=self.params.s, m=self.params.m)
        # A frozen copy keeps ArcFace's margin rule with the prototypes as fixed weights.
        self.arc = arc.frozen_copy(fit_width(protos, d))

    @property
    def prototypes(self) -> torch.Tensor:
        assert self.arc is not None
        return self.arc.weight

    def on_epoch_start(self, epoch: int, ctx: MethodContext) -> None:
        if epoch not in self.refresh_epochs or ctx.model is None:
            return
        new = embed_images(
            ctx.model,
            ctx.images,
            batch_size=ctx.embed_batch_size,
            device=ctx.device,
            channels_last=True,
        )
        protos = self.build_prototypes(ctx, new).to(ctx.device)
        with torch.no_grad():
            self.prototypes.copy_(fit_width(protos, self.prototypes.shape[1]))

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        assert self.arc is not None
        new = fit_width(step.new, self.arc.dim)
        influence = F.cross_entropy(self.arc(new, step.targets), step.targets)
        return {"head": step.head_loss, "influence": self.params.lam * influence}


__all__ = ["UniBCT", "UniBCTParams", "refine_closed_form", "refined_prototypes"]
