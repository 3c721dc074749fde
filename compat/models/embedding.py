"""The embedding model: backbone -> linear -> BatchNorm1d -> embedding.

``forward`` returns the raw embedding (heads and losses normalise what they need); ``embed``
returns it L2-normalised, which is what a gallery stores. The BatchNorm1d after the projection is
the usual face/re-id "BNNeck": it centres the embedding so cosine heads train well.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class EmbeddingModel(nn.Module):
    """``backbone`` (any module with ``out_features``) followed by a ``dim``-wide embedding layer."""

    def __init__(self, backbone: nn.Module, dim: int) -> None:
        super().__init__()
        if dim < 1:
            raise ValueError(f"embedding dim must be >= 1, got {dim}")
        self.backbone = backbone
        self.dim = dim
        self.proj = nn.Linear(int(backbone.out_features), dim)
        self.bn = nn.BatchNorm1d(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(n, C, H, W) float in [-1, 1] -> (n, dim) raw embeddings."""
        return self.bn(self.proj(self.backbone(x)))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """(n, C, H, W) -> (n, dim) L2-normalised float32 embeddings."""
        return F.normalize(self.forward(x).float(), dim=1)


def build_embedding_model(
    backbone: str,
    dim: int,
    *,
    in_channels: int = 3,
    image_size: int = 32,
    pooling: str = "avg",
    backbone_weights: str | None = None,
) -> EmbeddingModel:
    """Backbone by name (see :mod:`compat.models.backbones`) plus the embedding layer."""
    from compat.models.backbones import create_backbone

    trunk = create_backbone(
        backbone,
        in_channels=in_channels,
        image_size=image_size,
        pooling=pooling,
        weights=backbone_weights,
    )
    return EmbeddingModel(trunk, dim)
