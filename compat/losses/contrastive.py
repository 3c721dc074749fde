"""contrastive: InfoNCE between the new and the parent's embeddings (UniBCT, IJCAI 2022, Eq. 12;
BiCT's supervised-contrastive variant):

    L_i = -log( exp(<n_i, o_i> / tau) / sum_{j : j = i or y_j != y_i} exp(<n_i, o_j> / tau) ),

anchor the new embedding n_i, positive the parent embedding o_i of the same augmented image,
negatives the parent embeddings o_j of other classes in the batch (features L2-normalised).
Same-class pairs j != i are masked out rather than counted as negatives: they are not wrong
matches. The parent backbone runs on the batch under inference mode.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from compat.losses.base import CompatLoss, MethodParams, Step, align_dims


class ContrastiveParams(MethodParams):
    lam: float = 1.0
    tau: float = 0.1
    dim_mismatch: Literal["truncate", "pad"] = "truncate"


def cross_model_infonce(
    anchors: torch.Tensor, keys: torch.Tensor, targets: torch.Tensor, tau: float
) -> torch.Tensor:
    """Mean InfoNCE of normalised ``anchors`` (n, d) against ``keys`` (n, d): the positive of row i
    is key i, its negatives the keys of other classes; same-class keys j != i are masked."""
    logits = anchors @ keys.T / tau
    n = len(targets)
    same = targets[:, None] == targets[None, :]
    same.fill_diagonal_(False)
    logits = logits.masked_fill(same, float("-inf"))
    return F.cross_entropy(logits, torch.arange(n, device=logits.device))  # Eq. (12)


class Contrastive(CompatLoss):
    name = "contrastive"
    Params = ContrastiveParams
    needs_parent_forward = True

    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        assert step.old is not None, "contrastive needs the parent's embeddings of the batch"
        p = self.params
        new, old = align_dims(step.new.float(), step.old.float(), p.dim_mismatch)
        nce = cross_model_infonce(
            F.normalize(new, dim=1), F.normalize(old, dim=1), step.targets, p.tau
        )
        return {"head": step.head_loss, "contrastive": p.lam * nce}
