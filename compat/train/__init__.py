"""Training: config (import-light), the fit loop, checkpoints, torchrun support, whole-version runs.

``from compat.train import TrainConfig`` does not import torch; ``fit``, ``train_version`` and
``train_arrays`` load the heavy modules on first use.
"""

from __future__ import annotations

from typing import Any

from compat.train.config import AugmentConfig, TrainConfig

_LAZY = {
    "fit": "compat.train.fit",
    "FitResult": "compat.train.fit",
    "train_version": "compat.train.run",
    "train_arrays": "compat.train.run",
    "DataInfo": "compat.train.run",
    "derive_seed": "compat.train.run",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'compat.train' has no attribute {name!r}")


__all__ = [
    "AugmentConfig",
    "DataInfo",
    "FitResult",
    "TrainConfig",
    "derive_seed",
    "fit",
    "train_arrays",
    "train_version",
]
