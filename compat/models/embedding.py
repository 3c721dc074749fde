"""The embedding model: backbone -> neck -> embedding.

``forward`` returns the raw embedding (heads and losses normalise what they need); ``embed``
returns it L2-normalised, which is what a gallery stores. Two necks, by name (``neck``):

- ``linear-bn`` (default): linear -> BatchNorm1d, the usual face/re-id "BNNeck". The BatchNorm
  after the projection centres the embedding and gives every coordinate unit variance, so cosine
  heads train well.
- ``bn-linear``: BatchNorm1d on the pooled backbone features, then a bias-free linear map, the
  embedding layer of the d-Simplex paper's code (Biondi et al., CVPR'24: ``z = fc1(x)``, no
  normalisation after it). The embedding is the linear image of the features, so nothing puts
  variance back into directions the classifier does not use. With a fixed d-Simplex head whose
  K vertices outnumber the classes trained so far, that matters: a BatchNorm after the
  projection spreads variance over all K - 1 coordinates, including the directions of vertices
  no class uses yet, and independently trained models disagree there (docs/findings.md,
  "d-Simplex: where the features live").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from compat.errors import BadInputError

NECKS = ("linear-bn", "bn-linear")


class EmbeddingModel(nn.Module):
    """``backbone`` (any module with ``out_features``) followed by a ``dim``-wide embedding layer
    (``neck``: see the module docstring)."""

    def __init__(self, backbone: nn.Module, dim: int, neck: str = "linear-bn") -> None:
        super().__init__()
        if dim < 1:
            raise ValueError(f"embedding dim must be >= 1, got {dim}")
        if neck not in NECKS:
            raise BadInputError(f"neck: unknown {neck!r}; known: {', '.join(NECKS)}")
        self.backbone = backbone
        self.dim = dim
        self.neck = neck
        features = int(backbone.out_features)
        if neck == "linear-bn":
            self.proj = nn.Linear(features, dim)
            self.bn = nn.BatchNorm1d(dim)
        else:
            self.bn = nn.BatchNorm1d(features)
            self.proj = nn.Linear(features, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(n, C, H, W) float in [-1, 1] -> (n, dim) raw embeddings."""
        if self.neck == "linear-bn":
            return self.bn(self.proj(self.backbone(x)))
        return self.proj(self.bn(self.backbone(x)))

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
    neck: str = "linear-bn",
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
    return EmbeddingModel(trunk, dim, neck)
