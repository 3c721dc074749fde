"""Compatibility methods, one module each, built by name: ``create_loss("bct", {"lam": 1.0})``.

See :mod:`compat.losses.base` for what a method declares and implements. Each method's
compatibility term is a pure tensor function of :mod:`compat.functional`; a method adds what the
pipeline needs around it (the parent, its classifier re-indexed to the new classes, buffers).

* :mod:`~compat.losses.base`           ``CompatLoss``, ``MethodParams``, what a method declares
* :mod:`~compat.losses.old_classifier` the parent's classifier, frozen, re-indexed (BCT Eq. 8)
* :mod:`~compat.losses.independent`    the head's loss alone (BCT's baseline)
* :mod:`~compat.losses.l2`             feature regression onto the parent (BCT Eq. 3)
* :mod:`~compat.losses.bct`            BCT's influence loss (Shen et al., CVPR 2020, Eq. 8)
* :mod:`~compat.losses.bct_kd`         BCT with knowledge distillation for the new classes
* :mod:`~compat.losses.lwf`            Learning without Forgetting (Li & Hoiem)
* :mod:`~compat.losses.unibct`         Universal BCT (Zhang et al., IJCAI 2022)
* :mod:`~compat.losses.contrastive`    InfoNCE against the parent (UniBCT Eq. 12)
* :mod:`~compat.losses.bict`           BiCT's backward term (Su et al.)
* :mod:`~compat.losses.hoc`            d-Simplex + Higher-Order Compatibility (Biondi et al.)
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
