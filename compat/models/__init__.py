"""Models: backbone catalog, embedding model, training heads, versions on disk, frozen parents."""

from compat.models.backbones import BACKBONES, create_backbone, load_backbone_weights
from compat.models.card import ModelCard, UpgradeCard, read_model_card, read_upgrade_card
from compat.models.embedding import EmbeddingModel, build_embedding_model
from compat.models.heads import HEADS, Head, create_head, simplex_vertices
from compat.models.parent import FrozenParent, embed_images
from compat.models.version import (
    load_head,
    load_parts,
    load_version,
    read_card,
    save_version,
)

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
