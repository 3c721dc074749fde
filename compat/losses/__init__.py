"""Compatibility methods, one module each, built by name: ``create_loss("bct", {"lam": 1.0})``.

See :mod:`compat.losses.base` for what a method declares and implements. Each method's
compatibility term is a pure tensor function of :mod:`compat.functional`; a method adds what the
pipeline needs around it (the parent, its classifier re-indexed to the new classes, buffers).
"""

from __future__ import annotations

from typing import Any

from compat.catalog import Catalog
from compat.losses.base import CompatLoss, MethodContext, MethodParams, Step, validate_params
from compat.losses.bct import BCT
from compat.losses.bct_kd import BCTKD
from compat.losses.bict import BiCT
from compat.losses.contrastive import Contrastive
from compat.losses.hoc import HOC
from compat.losses.independent import Independent
from compat.losses.l2 import L2
from compat.losses.lwf import LwF
from compat.losses.unibct import UniBCT

LOSSES: Catalog[CompatLoss] = Catalog("method")

for _cls in (Independent, L2, BCT, BCTKD, LwF, UniBCT, Contrastive, BiCT, HOC):
    LOSSES.register(_cls.name)(_cls)


def loss_class(name: str) -> type[CompatLoss]:
    """The method's class; UsageError listing the known methods if ``name`` is unknown."""
    return LOSSES.get(name)  # type: ignore[return-value]


def create_loss(name: str, params: dict[str, Any] | None = None) -> CompatLoss:
    """Build a method by name, validating ``params`` against its params model."""
    cls = loss_class(name)
    return cls(validate_params(cls, params))


__all__ = [
    "LOSSES",
    "CompatLoss",
    "MethodContext",
    "MethodParams",
    "Step",
    "create_loss",
    "loss_class",
]
