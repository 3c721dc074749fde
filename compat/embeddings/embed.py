"""Embedding extraction: batched, float32, L2-normalised, through the one shared transform.

``model`` is any ``torch.nn.Module`` mapping float (n, C, H, W) images in [-1, 1] to (n, d)
embeddings. Images enter as uint8 (n, H, W, C) and go through
:func:`compat.data.transforms.to_tensor`, whose ``TRANSFORM_ID`` is part of every cache key
(:func:`cache_key`), so embeddings made under another conversion are never reused.

The model runs as :func:`inference_model` makes it: every convolution followed by a BatchNorm
becomes one convolution with the BatchNorm's affine map folded into its weights and bias (the
same function up to float rounding, about 1e-8 on small-cnn's embeddings), so inference makes
one pass over each activation instead of two: 1.5x the images per second of small-cnn on the
CPU (docs/findings.md, "Training on the CPU"). A model torch.fx cannot trace runs as it is.
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

__all__ = [
    "CacheKey",
    "EmbeddingCache",
    "cache_key",
    "embed_images",
    "embed_items",
    "inference_model",
]


def inference_model(model: nn.Module) -> nn.Module:
    """A copy of ``model`` in eval mode with each Conv+BatchNorm pair folded into one conv
    (``torch.fx.experimental.optimization.fuse``); ``model`` itself is not changed. A model
    with no such pair, or one that symbolic tracing cannot follow (data-dependent control
    flow), is returned as it is: the same model always takes the same path, so its embeddings
    never depend on which call made them."""
    from torch.fx.experimental.optimization import fuse

    def norms(m: nn.Module) -> int:
        return sum(isinstance(x, nn.modules.batchnorm._BatchNorm) for x in m.modules())

    if norms(model) == 0:
        return model  # nothing to fold: never trace (tracing runs Python side effects once)
    with eval_mode(model):
        try:
            folded = fuse(model, inplace=False).eval()
        except Exception:  # torch.fx raises many kinds (TraceError, TypeError, ...)
            return model
    return folded if norms(folded) < norms(model) else model


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
    fold: bool = True,
) -> np.ndarray:
    """L2-normalised float32 (n, d) embeddings of uint8 (n, H, W, C) ``images``.

    Runs in eval mode under ``torch.inference_mode`` and restores the model's train/eval mode
    afterwards. (The training loop embeds with :func:`compat.models.parent.embed_images`, whose
    input layout, and so whose last bits, differ; see there.) ``device``: where to run (the model is moved there, as ``nn.Module.to`` does);
    default: wherever the model's parameters are. ``fold``: run :func:`inference_model`'s copy
    (False for a model that already is one: a server folds once, not per request).
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

    return _run(model, batches, arr.shape[0], device, fold)


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
    fold: bool = True,
) -> np.ndarray:
    dev = torch.device(device) if device is not None else _device_of(model)
    if device is not None:
        model.to(dev)
    runner = inference_model(model) if fold else model
    with eval_mode(runner):
        return _embed_batches(runner, batches, n, dev)
