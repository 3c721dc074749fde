"""Embedding extraction: batched, float32, L2-normalised, through the one shared transform.

``model`` is any ``torch.nn.Module`` mapping float (n, C, H, W) images in [-1, 1] to (n, d)
embeddings. Images enter as uint8 (n, H, W, C) and go through
:func:`compat.data.transforms.to_tensor`, whose ``TRANSFORM_ID`` is part of every cache key
(:func:`cache_key`), so embeddings made under another conversion are never reused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from compat.data.transforms import to_tensor
from compat.embeddings.cache import CacheKey, EmbeddingCache, cache_key
from compat.errors import BadInputError
from compat.models.parent import eval_mode

__all__ = ["CacheKey", "EmbeddingCache", "cache_key", "embed_images", "embed_items"]


def _device_of(model: nn.Module) -> torch.device:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


@torch.inference_mode()
def _embed_batches(
    model: nn.Module, batches: Callable[[], object], n: int, device: torch.device
) -> np.ndarray:
    out: np.ndarray | None = None
    row = 0
    for images in batches():  # type: ignore[attr-defined]
        x = to_tensor(images).to(device, non_blocking=True)
        y = model(x)
        if not isinstance(y, torch.Tensor) or y.ndim != 2 or y.shape[0] != x.shape[0]:
            shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise BadInputError(
                f"model output: embeddings: expected shape ({x.shape[0]}, d), got {shape}"
            )
        y = y.float()
        if not torch.isfinite(y).all():
            raise BadInputError(
                f"model output: embeddings: NaN or inf for rows {row}..{row + y.shape[0] - 1}"
            )
        y = nn.functional.normalize(y, dim=1)
        if out is None:
            out = np.empty((n, y.shape[1]), dtype=np.float32)
        out[row : row + y.shape[0]] = y.cpu().numpy()
        row += y.shape[0]
    if out is None or row != n:
        raise BadInputError(f"images: expected {n} images, embedded {row}")
    return out


def embed_images(
    model: nn.Module,
    images: np.ndarray,
    batch_size: int = 512,
    device: str | torch.device | None = None,
) -> np.ndarray:
    """L2-normalised float32 (n, d) embeddings of uint8 (n, H, W, C) ``images``.

    Runs in eval mode under ``torch.inference_mode`` and restores the model's train/eval mode
    afterwards. (The training loop embeds with :func:`compat.models.parent.embed_images`, whose
    input layout, and so whose last bits, differ; see there.) ``device``: where to run (the model is moved there, as ``nn.Module.to`` does);
    default: wherever the model's parameters are.
    """
    arr = np.asarray(images)
    if arr.ndim != 4 or arr.dtype != np.uint8:
        raise BadInputError(
            f"images: expected uint8 (n, H, W, C), got {arr.dtype} {tuple(arr.shape)}"
        )
    if arr.shape[0] == 0:
        raise BadInputError("images: empty array")

    def batches():
        for s in range(0, arr.shape[0], batch_size):
            yield arr[s : s + batch_size]

    return _run(model, batches, arr.shape[0], device)


def embed_items(
    model: nn.Module,
    load: Callable[[Sequence[str]], np.ndarray],
    ids: Sequence[str],
    batch_size: int = 512,
    device: str | torch.device | None = None,
) -> np.ndarray:
    """Like :func:`embed_images`, reading images batch by batch with ``load(ids)``
    (e.g. ``Source.load``), so a large evaluation set never sits in memory at once."""
    if len(ids) == 0:
        raise BadInputError("images: empty list of items")

    def batches():
        for s in range(0, len(ids), batch_size):
            yield load(ids[s : s + batch_size])

    return _run(model, batches, len(ids), device)


def _run(
    model: nn.Module,
    batches: Callable[[], object],
    n: int,
    device: str | torch.device | None,
) -> np.ndarray:
    dev = torch.device(device) if device is not None else _device_of(model)
    if device is not None:
        model.to(dev)
    with eval_mode(model):
        return _embed_batches(model, batches, n, dev)
