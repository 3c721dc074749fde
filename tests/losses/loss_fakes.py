"""A parent whose embedding of a 1x1, 2-channel image is its pixel values in [-1, 1].

uint8 255 -> 1.0 and 0 -> -1.0, so parent embeddings of test images are exactly known and losses
can be checked against hand-computed values.
"""

from __future__ import annotations

import torch
from torch import nn

from compat.losses.base import MethodContext
from compat.models.card import ModelCard
from compat.models.heads import create_head
from compat.models.parent import FrozenParent


class PixelModel(nn.Module):
    dim = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


def pixel_parent(classes, weight, head="cosface", s=2.0, m=0.5) -> FrozenParent:
    weight = torch.as_tensor(weight, dtype=torch.float32)
    h = create_head(head, weight.shape[1], len(classes), s=s, m=m)
    with torch.no_grad():
        if head in ("softmax", "linear"):
            h.fc.weight.copy_(weight)
            if h.fc.bias is not None:
                h.fc.bias.zero_()
        elif head != "dsimplex":
            h.weight.copy_(weight)
    card = fake_card(version="v1", dim=weight.shape[1], classes=list(classes), head=head)
    return FrozenParent(PixelModel(), h, card)


def fake_card(**fields) -> ModelCard:
    """A parent's model card with a tiny architecture and the given fields."""
    base = {"backbone": "tiny", "dim": 2, "in_channels": 1, "image_size": 8, "pooling": "avg",
            "weights_sha256": "0" * 64}  # fmt: skip
    return ModelCard.model_validate({**base, **fields})


def pixels(*rows) -> torch.Tensor:
    """uint8 images (n, 1, 1, 2) from (a, b) pairs of 0/255."""
    return torch.tensor(rows, dtype=torch.uint8).view(len(rows), 1, 1, 2)


def context(parent, classes, images, labels, dim=2, head=None) -> MethodContext:
    targets = torch.tensor([classes.index(c) for c in labels])
    head = head or create_head("cosface", dim, len(classes))
    return MethodContext(
        classes=list(classes), images=images, targets=targets, dim=dim, head=head, parent=parent
    )
