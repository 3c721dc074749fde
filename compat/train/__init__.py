"""Training: config (import-light), the fit loop, checkpoints, torchrun support, whole-version runs.

``from compat.train import TrainConfig`` does not import torch; ``fit``, ``train_version`` and
``train_arrays`` load the heavy modules on first use.

* :mod:`~compat.train.config`      the ``train.<version>`` params section (pydantic only)
* :mod:`~compat.train.run`         one version end to end: checks, data, parent, fit, write
* :mod:`~compat.train.fit`         the fit loop: arrays in, trained model out
* :mod:`~compat.train.init`        where the weights start: scratch or the parent's
* :mod:`~compat.train.sampler`     which images make up a batch: random or balanced
* :mod:`~compat.train.augment`     batched augmentation on the training device
* :mod:`~compat.train.schedule`    learning-rate schedules as functions of the step
* :mod:`~compat.train.checkpoint`  per-epoch checkpoints without pickle
* :mod:`~compat.train.device`      where a fit runs and how deterministic it is
* :mod:`~compat.train.distributed` torchrun support
* :mod:`~compat.train.progress`    what a run reports: progress bar, JSON rows, MLflow metrics
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
