"""The fixed d-Simplex classifier (Pernici et al., "Regular Polytope Networks"; Biondi et al.,
"Stationary Representations"): K pre-allocated class directions that never train, so every
model trained against them shares its class directions with every other."""

from __future__ import annotations

import torch

from compat.models.heads import simplex_vertices


def dsimplex_vertices(
    k: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """(K, K - 1) unit vectors with pairwise cosine -1/(K - 1): the d-Simplex classifier W."""
    return simplex_vertices(k, dtype).to(device=device)


def dsimplex_logits(features: torch.Tensor, vertices: torch.Tensor | None = None) -> torch.Tensor:
    """The paper's logits W z: the unnormalised feature z (n, d) against the fixed vertices W
    (K, d); ``vertices`` defaults to the d-Simplex of K = d + 1. Train with plain cross-entropy
    (``F.cross_entropy(dsimplex_logits(z), y)``); no scale, no margin, no bias."""
    if vertices is None:
        vertices = dsimplex_vertices(features.shape[-1] + 1, device=features.device)
    return features.float() @ vertices.to(features.device, torch.float32).T
