"""A trained version on disk: ``weights.safetensors`` + ``card.json`` in ``models/<version>/``.

The weights file holds the embedding model under ``model.*`` and the training head under
``head.*``; it is safetensors, so loading never unpickles anything. The card records what the
weights are (architecture, head, classes, method, parent, data fingerprints) and their sha256;
:func:`load_version` refuses weights whose digest does not match the card.
"""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch import nn

from compat.errors import BadInputError, NotFoundError
from compat.io import atomic_path, sha256_bytes
from compat.models.card import CARD, CARD_SCHEMA, ModelCard, read_model_card, write_model_card

WEIGHTS = "weights.safetensors"


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("compat", "torch", "torchvision", "numpy", "safetensors"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "unknown"
    return versions


def weights_state(model: nn.Module, head: nn.Module | None) -> dict[str, torch.Tensor]:
    """The tensors a version's weights file holds, contiguous and on the CPU."""
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    if head is not None:
        state.update({f"head.{k}": v for k, v in head.state_dict().items()})
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}


def save_version(
    out_dir: str | Path, model: nn.Module, head: nn.Module | None, fields: dict[str, Any]
) -> ModelCard:
    """Write weights then card (each atomically); return the card.

    ``fields`` are the card's fields but ``schema`` and ``weights_sha256``, which this sets
    (``packages`` defaults to the running versions). The card is checked before anything is
    written and written last, so a half-finished save leaves no card and is never loaded.
    """
    from safetensors.torch import save

    out = Path(out_dir)
    blob = save(weights_state(model, head), metadata={"format": "pt"})
    card = ModelCard.model_validate(
        {"packages": package_versions(), **fields, "schema": CARD_SCHEMA,
         "weights_sha256": sha256_bytes(blob)}
    )  # fmt: skip
    with atomic_path(out / WEIGHTS) as tmp:
        tmp.write_bytes(blob)
    write_model_card(out, card)
    return card


def read_card(path: str | Path) -> ModelCard:
    """Read ``<path>/card.json`` (``path`` is the version folder or the card itself)."""
    return read_model_card(path)


def read_verified(path: Path, expected_sha256: str, what: str) -> bytes:
    """The bytes of a weights file whose sha256 must equal the one its card records."""
    if not path.is_file():
        raise NotFoundError(f"{path}: {what} not found")
    blob = path.read_bytes()
    digest = sha256_bytes(blob)
    if digest != expected_sha256:
        raise BadInputError(
            f"{path}: sha256 {digest[:12]}... does not match card.json weights_sha256 "
            f"{str(expected_sha256)[:12]}...; the weights were changed or the card is stale"
        )
    return blob


def read_weights(path: str | Path, card: ModelCard | None = None) -> dict[str, torch.Tensor]:
    """Load the weights tensors of a version folder after checking their sha256 against the card."""
    from safetensors.torch import load

    folder = Path(path)
    card = read_card(folder) if card is None else card
    weights_path = folder / WEIGHTS
    blob = read_verified(weights_path, card.weights_sha256, "weights")
    try:
        return load(blob)
    except Exception as err:
        raise BadInputError(f"{weights_path}: not a safetensors file: {err}") from None


def _sub_state(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def build_model_from_card(card: ModelCard) -> nn.Module:
    """The (untrained) embedding model the card describes."""
    from compat.models.embedding import build_embedding_model

    return build_embedding_model(
        card.backbone,
        card.dim,
        in_channels=card.in_channels,
        image_size=card.image_size,
        pooling=card.pooling,
        neck=card.neck,
    )


def build_head_from_card(card: ModelCard) -> nn.Module | None:
    """The (untrained) head the card describes; None when the version was saved without one."""
    from compat.models.heads import create_head

    if not card.head:
        return None
    if card.num_classes is None:
        raise BadInputError(f"{card.version or 'card'}: num_classes: missing for head {card.head}")
    return create_head(card.head, card.dim, card.num_classes, **(card.head_params or {}))


def _load_into(module: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as err:
        first = str(err).splitlines()[0] if str(err) else "state mismatch"
        raise BadInputError(
            f"{where}: weights do not fit the card's architecture: {first}"
        ) from None


def load_parts(path: str | Path) -> tuple[nn.Module, nn.Module | None, ModelCard]:
    """(embedding model, head or None, card) of a version folder, both modules in eval mode."""
    folder = Path(path)
    if not folder.is_dir():
        raise NotFoundError(f"{folder}: version folder not found")
    card = read_card(folder)
    tensors = read_weights(folder, card)
    model = build_model_from_card(card)
    _load_into(model, _sub_state(tensors, "model."), f"{folder / WEIGHTS}: model")
    head = None
    head_state = _sub_state(tensors, "head.")
    if head_state and card.head:
        head = build_head_from_card(card)
        assert head is not None
        _load_into(head, head_state, f"{folder / WEIGHTS}: head")
        head.eval()
    return model.eval(), head, card


def load_version(path: str | Path) -> tuple[nn.Module, ModelCard]:
    """The version's EmbeddingModel (eval mode) and its card.

    ``model(x)`` on float (n, C, H, W) images in [-1, 1] returns raw (n, dim) embeddings;
    ``model.embed(x)`` returns them L2-normalised. Raises NotFoundError when the folder, card or
    weights are missing and BadInputError when the weights' sha256 does not match the card.
    """
    model, _, card = load_parts(path)
    return model, card


def load_head(path: str | Path) -> tuple[nn.Module, ModelCard]:
    """The version's training head (eval mode) and its card; BadInputError if it has none."""
    _, head, card = load_parts(path)
    if head is None:
        raise BadInputError(
            f"{Path(path) / CARD}: this version was saved without a classifier head"
        )
    return head, card
