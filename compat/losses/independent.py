"""independent: the head's loss alone, L = L_head(phi_new) (BCT's "independent" baseline).

Trained on the new data it is the paragon (M(new*, new*)); its cross test against the parent is
expected near chance, since nothing ties its embedding space to the parent's.
"""

from __future__ import annotations

import torch

from compat.losses.base import CompatLoss, MethodParams, Step


class IndependentParams(MethodParams):
    pass


class Independent(CompatLoss):
    """No compatibility term; a parent, if named, is lineage only and is never loaded."""

    name = "independent"
    Params = IndependentParams
    requires_parent = False

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        return {"head": step.head_loss}
