"""A trained version on disk: ``weights.safetensors`` + ``card.json`` in ``models/<version>/``.

The weights file holds the embedding model under ``model.*`` and the training head under
``head.*``; it is safetensors, so loading never unpickles anything. The card records what the
weights are (architecture, head, classes, method, parent, data fingerprints) and their sha256;
:func:`load_version` refuses weights whose digest does not match the card.
"""

from __future__ import annotations

import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch import nn

from compat.errors import BadInputError, NotFoundError
from compat.io import atomic_path, sha256_bytes, write_json

WEIGHTS = "weights.safetensors"
CARD = "card.json"
CARD_SCHEMA = 1

# Card fields :func:`build_model_from_card` needs; anything else is provenance.
_ARCH_FIELDS = ("backbone", "dim", "in_channels", "image_size", "pooling")


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
    out_dir: str | Path, model: nn.Module, head: nn.Module | None, card: dict[str, Any]
) -> dict[str, Any]:
    """Write weights then card (each atomically); return the card with ``weights_sha256`` set.

    The card is written last, so a half-finished save leaves no card and is never loaded.
    """
    from safetensors.torch import save

    out = Path(out_dir)
    blob = save(weights_state(model, head), metadata={"format": "pt"})
    card = {**card, "schema": CARD_SCHEMA, "weights_sha256": sha256_bytes(blob)}
    card.setdefault("packages", package_versions())
    with atomic_path(out / WEIGHTS) as tmp:
        tmp.write_bytes(blob)
    write_json(out / CARD, card)
    return card


def read_card(path: str | Path) -> dict[str, Any]:
    """Read ``<path>/card.json`` (``path`` is the version folder or the card itself)."""
    p = Path(path)
    card_path = p / CARD if p.is_dir() or p.suffix != ".json" else p
    if not card_path.is_file():
        raise NotFoundError(f"{card_path}: model card not found")
    try:
        card = json.loads(card_path.read_text())
    except json.JSONDecodeError as err:
        raise BadInputError(f"{card_path}: not valid JSON: {err}") from None
    if not isinstance(card, dict):
        raise BadInputError(f"{card_path}: a model card must be a JSON object")
    missing = [f for f in (*_ARCH_FIELDS, "weights_sha256") if f not in card]
    if missing:
        raise BadInputError(f"{card_path}: missing fields {missing}")
    return card


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


def read_weights(path: str | Path, card: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """Load the weights tensors of a version folder after checking their sha256 against the card."""
    from safetensors.torch import load

    folder = Path(path)
    card = read_card(folder) if card is None else card
    weights_path = folder / WEIGHTS
    blob = read_verified(weights_path, card["weights_sha256"], "weights")
    try:
        return load(blob)
    except Exception as err:
        raise BadInputError(f"{weights_path}: not a safetensors file: {err}") from None


def _sub_state(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def build_model_from_card(card: dict[str, Any]) -> nn.Module:
    from compat.models.embedding import build_embedding_model

    return build_embedding_model(
        card["backbone"],
        int(card["dim"]),
        in_channels=int(card["in_channels"]),
        image_size=int(card["image_size"]),
        pooling=card["pooling"],
    )


def build_head_from_card(card: dict[str, Any]) -> nn.Module | None:
    from compat.models.heads import create_head

    if not card.get("head"):
        return None
    return create_head(
        card["head"], int(card["dim"]), int(card["num_classes"]), **card.get("head_params", {})
    )


def _load_into(module: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as err:
        first = str(err).splitlines()[0] if str(err) else "state mismatch"
        raise BadInputError(
            f"{where}: weights do not fit the card's architecture: {first}"
        ) from None


def load_parts(path: str | Path) -> tuple[nn.Module, nn.Module | None, dict[str, Any]]:
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
    if head_state and card.get("head"):
        head = build_head_from_card(card)
        assert head is not None
        _load_into(head, head_state, f"{folder / WEIGHTS}: head")
        head.eval()
    return model.eval(), head, card


def load_version(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """The version's EmbeddingModel (eval mode) and its card.

    ``model(x)`` on float (n, C, H, W) images in [-1, 1] returns raw (n, dim) embeddings;
    ``model.embed(x)`` returns them L2-normalised. Raises NotFoundError when the folder, card or
    weights are missing and BadInputError when the weights' sha256 does not match the card.
    """
    model, _, card = load_parts(path)
    return model, card


def load_head(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """The version's training head (eval mode) and its card; BadInputError if it has none."""
    _, head, card = load_parts(path)
    if head is None:
        raise BadInputError(
            f"{Path(path) / CARD}: this version was saved without a classifier head"
        )
    return head, card
