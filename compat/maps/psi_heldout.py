"""psi's held-out check, in numbers: which pairs are held out, the top-1 retrieval scored on
them, and the lower confidence bound of psi's paired top-1 gain (BiCT's upgrade module, Su et
al., "Privacy-Preserving Model Upgrades with Bidirectional Compatible Training in Image
Retrieval"; the criterion is BCT's, Shen et al. CVPR 2020 Eq. 2, read for "with psi" against
"without it").

:func:`heldout_split` holds out whole classes when labels allow (psi and every map are then
checked on classes they never fitted, as the evaluation's gallery classes are); psi's fit loop
(:mod:`compat.maps.psi_fit`) scores every epoch with :func:`heldout_top1` and refuses a psi whose
:func:`gain_lower_bound` over the old gallery left alone is not above ``min_gain``; the maps'
fit (:func:`compat.maps.fit.fit_map`) reuses the split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import torch


@torch.inference_mode()
def heldout_hits(
    queries: torch.Tensor, gallery: torch.Tensor, labels: Sequence[Any] | None = None
) -> torch.Tensor:
    """Per scored query, whether its top-1 retrieval is right (bool); see :func:`heldout_top1`."""
    n = len(queries)
    if n == 0:
        return torch.zeros(0, dtype=torch.bool)
    sims = queries.float() @ gallery.float().T
    if labels is not None:
        codes = torch.as_tensor(_codes(labels), device=sims.device)
        same = codes[:, None] == codes[None, :]
        has_mate = (same.sum(dim=1) - 1) > 0
        if bool(has_mate.any()):
            sims.fill_diagonal_(float("-inf"))
            best = sims.argmax(dim=1)
            return (codes[best] == codes)[has_mate].cpu()
    best = sims.argmax(dim=1)
    return (best == torch.arange(n, device=sims.device)).cpu()


def heldout_top1(
    queries: torch.Tensor, gallery: torch.Tensor, labels: Sequence[Any] | None = None
) -> float:
    """Top-1 retrieval of row-paired ``queries`` (new embeddings) against ``gallery`` (old
    embeddings, upgraded or not), both L2-normalised (n, d).

    With ``labels``: query i searches every gallery row but its own pair i (the query image is
    not in the gallery, as at evaluation) and is right when the nearest row has its label;
    queries whose label has no other row are left out. Without labels (or when no query has a
    mate): query i is right when its nearest gallery row is its own pair i. Ties go to the lower
    row index. NaN when there is nothing to score."""
    hits = heldout_hits(queries, gallery, labels)
    return float(hits.float().mean()) if len(hits) else float("nan")


def gain_lower_bound(with_psi: torch.Tensor, without: torch.Tensor, confidence: float) -> float:
    """One-sided lower confidence bound of the paired top-1 gain mean(d), d_i = hit_i(psi) -
    hit_i(no upgrade) on the same queries: mean(d) - z * sd(d) / sqrt(n) (normal approximation,
    z the ``confidence`` quantile). With fewer than two queries, mean(d)."""
    d = with_psi.double() - without.double()
    n = len(d)
    if n == 0:
        return float("nan")
    mean = float(d.mean())
    if n < 2:
        return mean
    z = NormalDist().inv_cdf(confidence)
    return mean - z * float(d.std(unbiased=True)) / math.sqrt(n)


def _codes(labels: Sequence[Any]) -> list[int]:
    index: dict[Any, int] = {}
    return [index.setdefault(x, len(index)) for x in labels]


def heldout_split(
    n: int, labels: Sequence[Any] | None, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """(fit rows, held-out rows, "classes" | "rows"), deterministic for ``seed``.

    With ``labels`` and room for at least two held-out classes, whole classes are held out
    (round(fraction x classes) of them): psi is then checked on classes it never fitted, as the
    evaluation's gallery classes are. Otherwise round(fraction x n) rows are held out."""
    if fraction > 0 and labels is not None:
        codes = np.asarray(_codes(labels))
        n_cls = int(codes.max()) + 1 if n else 0
        k = round(fraction * n_cls)
        if 2 <= k < n_cls:
            held = np.random.default_rng([seed, 0xC1A5]).permutation(n_cls)[:k]
            mask = np.isin(codes, held)
            return np.flatnonzero(~mask), np.flatnonzero(mask), "classes"
    order = np.random.default_rng([seed, 0xB1C7]).permutation(n)
    n_val = round(fraction * n) if n > 2 else 0
    return np.sort(order[n_val:]), np.sort(order[:n_val]), "rows"


__all__ = ["gain_lower_bound", "heldout_hits", "heldout_split", "heldout_top1"]
