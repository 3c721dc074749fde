"""Batched augmentation of uint8 (n, H, W, C) images: one gather for the whole batch.

A random shift is pad-then-crop per sample; done as index arithmetic (each output pixel reads
input pixel (r - dy, c - dx)), it costs one advanced-indexing gather on whatever device the batch
is on, instead of a Python loop over samples. ``edge`` padding repeats the border (clamped indices),
``zero`` fills with 0. The random draws come from a dedicated CPU generator (:func:`draw`), so they
do not depend on the device and are restored exactly from a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compat.train.config import AugmentConfig


@dataclass
class AugmentDraw:
    shifts: torch.Tensor  # (n, 2) int64: dy, dx
    flips: torch.Tensor  # (n,) bool


def draw(n: int, cfg: AugmentConfig, generator: torch.Generator) -> AugmentDraw:
    """Random parameters for ``n`` samples (always the same number of draws, for any config)."""
    k = cfg.shift
    shifts = torch.randint(-k, k + 1, (n, 2), generator=generator)
    flips = torch.rand(n, generator=generator) < 0.5
    if not cfg.hflip:
        flips = torch.zeros_like(flips)
    return AugmentDraw(shifts, flips)


def shift_images(
    images: torch.Tensor,
    shifts: torch.Tensor,
    pad_mode: str = "edge",
    flips: torch.Tensor | None = None,
) -> torch.Tensor:
    """Translate each image by its (dy, dx) (and mirror it where ``flips``); uint8 in, uint8 out."""
    n, h, w, _ = images.shape
    dev = images.device
    pad = int(shifts.abs().max()) if n else 0  # read before the transfer: no device sync
    shifts = shifts.to(dev)
    rows = torch.arange(h, device=dev)[None, :] - shifts[:, :1]  # (n, h)
    cols = torch.arange(w, device=dev)[None, :] - shifts[:, 1:]  # (n, w)
    if flips is not None:
        cols = torch.where(flips.to(dev)[:, None], w - 1 - cols, cols)
    if pad_mode == "edge":
        src = images
        rows, cols = rows.clamp(0, h - 1), cols.clamp(0, w - 1)
    elif pad_mode == "zero":
        src = torch.nn.functional.pad(images, (0, 0, pad, pad, pad, pad))
        rows, cols = rows + pad, cols + pad
    else:
        raise ValueError(f"pad_mode: unknown {pad_mode!r}; known: edge, zero")
    batch = torch.arange(n, device=dev)[:, None, None]
    return src[batch, rows[:, :, None], cols[:, None, :]]


def augment(images: torch.Tensor, d: AugmentDraw, cfg: AugmentConfig) -> torch.Tensor:
    if cfg.shift == 0 and not cfg.hflip:
        return images
    return shift_images(images, d.shifts, cfg.pad_mode, d.flips if cfg.hflip else None)
