"""Class prototypes from old-model embeddings: BCT's synthesized classifier rows ("sys") and
UniBCT's pseudo prototypes, vanilla or refined (Zhang et al., IJCAI 2022, "Towards Universal
Backward-Compatible Representation Learning", structural prototype refinement).

Refinement, per class, with F the new model's normalised features of its m samples and V0 their
old features: A = F F^T / tau with the diagonal masked, E = row-softmax(A), and

    V_inf = (1 - lambda_r) (I - lambda_r E)^-1 V0,

the fixed point of V <- lambda_r E V + (1 - lambda_r) V0; the prototype is the mean row of
V_inf. Outlying old embeddings, poorly connected in the new model's graph, weigh less.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def class_means(features: torch.Tensor, labels: torch.Tensor, num: int) -> torch.Tensor:
    """(num, d) mean feature of each label 0..num-1 (zero rows for absent labels)."""
    sums = torch.zeros(num, features.shape[1], dtype=features.dtype, device=features.device)
    sums.index_add_(0, labels, features)
    counts = torch.bincount(labels, minlength=num).clamp(min=1).to(features.dtype)
    return sums / counts[:, None]


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
    return (1.0 - lambda_r) * torch.linalg.solve(system, old_feats)  # the fixed point


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
    labels = labels.cpu()
    order = torch.argsort(labels, stable=True)
    counts = torch.bincount(labels, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    new_feats, old_feats = new_feats.cpu(), old_feats.cpu()
    for size in torch.unique(counts).tolist():
        if size == 0:
            continue
        cls = torch.nonzero(counts == size).flatten()
        rows = order[starts[cls][:, None] + torch.arange(size)[None, :]]  # (c, size)
        v = refine_closed_form(new_feats[rows].double(), old_feats[rows].double(), lambda_r, tau)
        out[cls] = v.mean(dim=1).to(out.dtype)
    return F.normalize(out, dim=1)


def unibct_prototypes(
    old: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    *,
    new: torch.Tensor | None = None,
    refine: bool = True,
    lambda_r: float = 0.9,
    tau: float = 0.05,
) -> torch.Tensor:
    """(num_classes, d_old) unit prototypes of UniBCT from the old model's embeddings ``old``
    (n, d_old) of the new training set.

    ``refine=False``: the normalised class mean (vanilla). ``refine=True``: structural prototype
    refinement over the new model's features ``new`` (n, d_new); before the new model has
    trained, leave ``new`` out and the old features stand in for it.
    """
    if not refine:
        return F.normalize(class_means(old, labels, num_classes), dim=1)
    graph = old if new is None else new
    return refined_prototypes(
        F.normalize(graph.float(), dim=1), old, labels, num_classes, lambda_r, tau
    )


def synthesized_rows(
    old: torch.Tensor, labels: torch.Tensor, num_classes: int, *, norm: float = 1.0
) -> torch.Tensor:
    """BCT's synthesized classifier ("sys", Sec. 3.3): one row per class 0..num_classes-1, the
    normalised mean of the old model's normalised embeddings ``old`` of that class, scaled to
    ``norm`` (1 for a normalised classifier; the old rows' mean norm for a plain linear one)."""
    means = class_means(F.normalize(old.float(), dim=1), labels, num_classes)
    return F.normalize(means, dim=1) * norm
