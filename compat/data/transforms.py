"""The one image -> tensor conversion shared by training and evaluation.

Images travel through compat as uint8 arrays of shape (n, H, W, C). Models see float tensors of
shape (n, C, H, W) scaled to [-1, 1]. ``TRANSFORM_ID`` names this conversion in embedding-cache
keys, so a cache entry made under another conversion is never reused.

torch is imported when a conversion runs, not with the module: a cache key (``TRANSFORM_ID``)
is all a gate on cached embeddings needs, and importing torch costs it seconds and ~600 MB.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

TRANSFORM_ID = "u8-nhwc/127.5-1"


def to_tensor(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 (n, H, W, C) -> float32 (n, C, H, W) in [-1, 1]."""
    import torch

    with warnings.catch_warnings():
        # A read-only array (a memory map, an MLflow input) is never written here: .float()
        # below copies it, so torch's "not writable" warning would only be noise.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        t = torch.as_tensor(images)
    if t.dtype != torch.uint8 or t.ndim != 4:
        raise ValueError(
            f"expected uint8 images of shape (n, H, W, C), got {t.dtype} {tuple(t.shape)}"
        )
    return t.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
