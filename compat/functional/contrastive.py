"""InfoNCE between the new and the old model's embeddings of the same batch: UniBCT's
cross-model contrastive term (Eq. 12) and HOC's higher-order compatibility loss (Biondi et al.,
"Stationary Representations", Eq. 4)."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from compat.errors import BadInputError
from compat.functional.align import align_dims


def _same_class(labels: torch.Tensor) -> torch.Tensor:
    return labels[:, None] == labels[None, :]


def contrastive(
    new: torch.Tensor,
    old: torch.Tensor,
    labels: torch.Tensor,
    tau: float = 0.1,
    *,
    dim_mismatch: str = "truncate",
) -> torch.Tensor:
    """UniBCT Eq. (12), averaged over the batch (features L2-normalised here):

        L_i = -log( exp(<n_i, o_i> / tau) / sum_{j : j = i or y_j != y_i} exp(<n_i, o_j> / tau) )

    anchor the new embedding n_i, positive the old embedding o_i of the same image, negatives the
    old embeddings of other classes; same-class pairs j != i are masked out (not wrong matches).
    """
    new, old = align_dims(new.float(), old.float(), dim_mismatch)
    logits = F.normalize(new, dim=1) @ F.normalize(old, dim=1).T / tau
    same = _same_class(labels)
    same.fill_diagonal_(False)
    logits = logits.masked_fill(same, float("-inf"))
    return F.cross_entropy(logits, torch.arange(len(labels), device=logits.device))


def hoc_infonce(
    new: torch.Tensor,
    old: torch.Tensor,
    labels: torch.Tensor,
    mu: float = 10.0,
    variant: Literal["reference", "standard"] = "reference",
) -> torch.Tensor:
    """HOC's InfoNCE between the old (anchor) and new (key) features of the same batch, averaged
    over the batch. Features are L2-normalised here; S_ij = mu <old_i, new_j>.

    - ``reference`` (the published code): S' equals S except that every same-class entry, the
      diagonal included, is replaced by 0; L_i = -S_ii + log sum_j exp(S'_ij). The positive is
      not in the denominator; each same-class entry adds exp(0) = 1 to it.
    - ``standard``: InfoNCE, L_i = -log(exp(S_ii) / sum_{j : j = i or y_j != y_i} exp(S_ij)):
      the positive stays in the denominator, same-class negatives j != i are masked out.
    """
    s = mu * F.normalize(old.float(), dim=1) @ F.normalize(new.float(), dim=1).T
    same = _same_class(labels)
    if variant == "reference":
        positive = torch.diagonal(s)
        return (torch.logsumexp(s.masked_fill(same, 0.0), dim=1) - positive).mean()
    if variant == "standard":
        same.fill_diagonal_(False)
        s = s.masked_fill(same, float("-inf"))
        return F.cross_entropy(s, torch.arange(len(labels), device=s.device))
    raise BadInputError(f"hoc: unknown variant {variant!r}; known: reference, standard")
