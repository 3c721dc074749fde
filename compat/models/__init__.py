"""Models: backbone catalog, embedding model, training heads, versions on disk, frozen parents,
and the cards beside the weights.

Names are imported on first use (PEP 562), so ``compat.models.card`` — what the registry, the
CLI and backfill read — loads without torch.

* :mod:`~compat.models.backbones` the backbone catalog (``tiny``, ``small-cnn``, ResNets)
* :mod:`~compat.models.embedding` backbone -> neck -> embedding
* :mod:`~compat.models.heads`     training heads built by name (softmax, linear, margin heads,
  the d-Simplex)
* :mod:`~compat.models.parent`    the parent as a frozen teacher
* :mod:`~compat.models.norms`     L2-normalising rows at any finite scale (numpy and torch)
* :mod:`~compat.models.rowblocks` row-wise maps over fixed row blocks (batch-independent bits)
* :mod:`~compat.models.version`   a trained version on disk (weights + card)
* :mod:`~compat.models.card`      the typed cards beside the weights (torch-free)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "BACKBONES": "compat.models.backbones",
    "create_backbone": "compat.models.backbones",
    "load_backbone_weights": "compat.models.backbones",
    "ModelCard": "compat.models.card",
    "UpgradeCard": "compat.models.card",
    "read_model_card": "compat.models.card",
    "read_upgrade_card": "compat.models.card",
    "EmbeddingModel": "compat.models.embedding",
    "build_embedding_model": "compat.models.embedding",
    "HEADS": "compat.models.heads",
    "Head": "compat.models.heads",
    "create_head": "compat.models.heads",
    "simplex_vertices": "compat.models.heads",
    "FrozenParent": "compat.models.parent",
    "embed_images": "compat.models.parent",
    "load_head": "compat.models.version",
    "load_parts": "compat.models.version",
    "load_version": "compat.models.version",
    "read_card": "compat.models.version",
    "save_version": "compat.models.version",
}

if TYPE_CHECKING:
    from compat.models.backbones import BACKBONES, create_backbone, load_backbone_weights
    from compat.models.card import ModelCard, UpgradeCard, read_model_card, read_upgrade_card
    from compat.models.embedding import EmbeddingModel, build_embedding_model
    from compat.models.heads import HEADS, Head, create_head, simplex_vertices
    from compat.models.parent import FrozenParent, embed_images
    from compat.models.version import load_head, load_parts, load_version, read_card, save_version


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'compat.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "BACKBONES",
    "HEADS",
    "EmbeddingModel",
    "FrozenParent",
    "Head",
    "ModelCard",
    "UpgradeCard",
    "build_embedding_model",
    "create_backbone",
    "create_head",
    "embed_images",
    "load_backbone_weights",
    "load_head",
    "load_parts",
    "load_version",
    "read_card",
    "read_model_card",
    "read_upgrade_card",
    "save_version",
    "simplex_vertices",
]
