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

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step, fit_width
from compat.losses.old_classifier import class_means
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
    refresh_at: list[int] | None = None
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


def refine_closed_form(
    new_feats: torch.Tensor, old_feats: torch.Tensor, lambda_r: float, tau: float
) -> torch.Tensor:
    """V_inf = (1 - lambda_r) (I - lambda_r E)^-1 V0 for one class, batched over a leading dim.

    new_feats: (..., m, d_new) normalised; old_feats: (..., m, d_old). Returns (..., m, d_old).
    """
    m = new_feats.shape[-2]
    if m < 2:
        return old_feats  # a single node has no neighbours: V_inf = V0
    a = new_feats @ new_feats.transpose(-1, -2) / tau
    eye = torch.eye(m, dtype=torch.bool, device=a.device)
    e = torch.softmax(a.masked_fill(eye, float("-inf")), dim=-1)
    system = torch.eye(m, dtype=a.dtype, device=a.device) - lambda_r * e
    return (1.0 - lambda_r) * torch.linalg.solve(
        system, old_feats
    )  # V_inf: the fixed point in closed form


def refined_prototypes(
    new_feats: torch.Tensor,
    old_feats: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    lambda_r: float,
    tau: float,
) -> torch.Tensor:
    """(num_classes, d_old) normalised refined prototypes; classes of equal size solve together."""
    out = torch.zeros(num_classes, old_feats.shape[1], dtype=old_feats.dtype)
    order = torch.argsort(labels, stable=True)
    counts = torch.bincount(labels, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    for size in torch.unique(counts).tolist():
        if size == 0:
            continue
        cls = torch.nonzero(counts == size).flatten()
        rows = order[starts[cls][:, None] + torch.arange(size)[None, :]]  # (c, size)
        v = refine_closed_form(new_feats[rows].double(), old_feats[rows].double(), lambda_r, tau)
        out[cls] = v.mean(dim=1).to(out.dtype)
    return F.normalize(out, dim=1)


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
        labels = ctx.targets.cpu()
        if self.params.prototypes == "vanilla":
            return F.normalize(class_means(old, labels, len(ctx.classes)), dim=1)
        graph_feats = old if new_feats is None else new_feats.cpu()
        p = self.params
        return refined_prototypes(graph_feats, old, labels, len(ctx.classes), p.lambda_r, p.tau)

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
