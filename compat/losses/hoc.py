"""hoc: d-Simplex fixed classifier + Higher-Order Compatibility (Biondi et al., "A Stationary (and
Therefore Compatible) Representation is All You Need" / CVPR'24 "Stationary Representations").

With a fixed d-Simplex head every version is trained against the same stationary classifier, so
successive embedding spaces share their class directions. The loss (Eq. 3) adds an InfoNCE term
between the new version (phi_t) and the previous one (phi_{t-1}):

    L = lambda * CE(dsimplex logits) + (1 - lambda) * L_nce(phi_t, phi_{t-1}),
    S_ij = mu <f_old_i, f_new_j>   (features L2-normalised),

anchor the parent's feature of image i, positive the new feature of the same image, negatives
the new features of other classes in the batch (:func:`compat.functional.hoc_infonce`):

- ``variant="reference"`` (default; the published code, Eq. 4): every same-class entry, the
  diagonal included, is replaced by 0, and L_i = -S_ii + log sum_j exp(S'_ij): the positive is
  not in the denominator;
- ``variant="standard"``: InfoNCE, -log(exp(S_ii) / sum_j exp(S_ij)) with same-class negatives
  j != i masked out.

The paper and its code use mu = 10 and lambda = 0.1. A first version (no parent) trains on the
CE alone, with weight 1.
"""

from __future__ import annotations

from typing import Literal

import torch

from compat.errors import BadInputError
from compat.functional.contrastive import hoc_infonce
from compat.losses.base import CompatLoss, MethodParams, Step
from compat.models.card import ModelCard


class HOCParams(MethodParams):
    lam: float = 0.1
    mu: float = 10.0
    variant: Literal["reference", "standard"] = "reference"


class HOC(CompatLoss):
    name = "hoc"
    Params = HOCParams
    requires_parent = False
    needs_parent_forward = True

    def check(self, parent_card: ModelCard | None, *, head: str, dim: int) -> None:
        super().check(parent_card, head=head, dim=dim)
        if head != "dsimplex":
            raise BadInputError(
                f"method hoc: needs the dsimplex head (got {head}): its compatibility comes from "
                "training every version against the same fixed d-Simplex classifier"
            )
        if parent_card is None:
            return
        if parent_card.head != "dsimplex":
            raise BadInputError(
                f"method hoc: parent {parent_card.version or '?'} was trained with head "
                f"{parent_card.head}, not dsimplex, so the two spaces share no fixed classifier"
            )
        if parent_card.dim != dim:
            raise BadInputError(
                f"method hoc: dim {dim} differs from the parent's {parent_card.dim}; the "
                "d-Simplex (K = dim + 1 vertices) must be the same for both versions"
            )

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        p = self.params
        if step.old is None:  # a first version: nothing to be compatible with
            return {"head": step.head_loss}
        nce = hoc_infonce(step.new, step.old, step.targets, p.mu, p.variant)
        return {"head": p.lam * step.head_loss, "nce": (1.0 - p.lam) * nce}
