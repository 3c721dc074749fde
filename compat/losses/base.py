"""What every compatibility method implements, and the pieces they share.

A method is an ``nn.Module`` that turns one training step (:class:`Step`) into named loss parts
whose sum is the training loss. It declares what it needs from the parent so the fit loop pays
only for that:

- ``requires_parent``: training without a parent is an error (bct, l2, ...); ``independent`` and
  ``hoc`` (a first version) train without one.
- ``needs_parent_forward``: the parent backbone runs (frozen, inference mode) on the same augmented
  batch (l2, bct-kd, lwf, contrastive, hoc). ``bct`` never sets it: it needs only the parent's
  classifier weights.

``check`` rejects an unworkable parent before any training starts; ``prepare`` builds buffers
from cached, un-augmented parent embeddings; ``on_epoch_start`` lets a method refresh them.
Buffers are part of ``state_dict``, so checkpoints carry them and a resumed run continues with
the same prototypes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from torch import nn

from compat.config import format_validation_error
from compat.errors import BadInputError
from compat.functional.align import align_dims, fit_width
from compat.models.card import ModelCard
from compat.models.heads import Head
from compat.models.parent import FrozenParent


class MethodParams(BaseModel):
    """Base of every method's params: unknown keys are errors, not silent defaults."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


@dataclass
class Step:
    """One training step as a loss sees it."""

    new: torch.Tensor  # raw new embeddings (n, d_new), with autograd history
    targets: torch.Tensor  # (n,) class indices in the new version's class order
    head_loss: torch.Tensor  # the new head's cross-entropy (scalar)
    old: torch.Tensor | None = None  # raw parent embeddings of the same augmented batch
    index: torch.Tensor | None = None  # (n,) dataset indices of the batch


@dataclass
class MethodContext:
    """Everything a method may look at while preparing (before the first step)."""

    classes: list[str]  # the new version's class order
    images: torch.Tensor  # all training images, uint8 (N, H, W, C) on the CPU
    targets: torch.Tensor  # (N,) class indices
    dim: int  # new embedding dim
    head: Head  # the new head
    parent: FrozenParent | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    epochs: int = 1
    embed_batch_size: int = 512
    model: nn.Module | None = None  # the new model (unibct embeds the training set with it)


class CompatLoss(nn.Module):
    """Base of the compatibility methods; see the module docstring."""

    name: ClassVar[str] = ""
    Params: ClassVar[type[MethodParams]] = MethodParams
    requires_parent: ClassVar[bool] = True
    needs_parent_forward: ClassVar[bool] = False
    needs_parent_head: ClassVar[bool] = False
    # Initialise the new model from the parent's weights (lwf fine-tunes its parent).
    init_from_parent: bool = False
    # What ``train.<v>.init: auto`` resolves to when the parent's architecture matches
    # (compat.train.init.resolve_init): BCT's family fine-tunes its parent by default.
    fine_tune_by_default: ClassVar[bool] = False

    def __init__(self, params: MethodParams) -> None:
        super().__init__()
        self.params = params

    # -- before training -------------------------------------------------------------------
    def check(self, parent_card: ModelCard | None, *, head: str, dim: int) -> None:
        """Raise BadInputError (saying why) if this method cannot train against ``parent_card``."""
        if parent_card is None:
            if self.requires_parent:
                raise BadInputError(f"method {self.name}: needs a parent version (set parent)")
            return
        if self.needs_parent_head and not parent_card.head:
            raise BadInputError(
                f"method {self.name}: parent {parent_card.version or '?'} was saved without a "
                "classifier head, and this method trains against the parent's classifier"
            )

    def prepare(self, ctx: MethodContext) -> None:
        """Build buffers (synthesized classifiers, prototypes) once, before the first step."""

    def on_epoch_start(self, epoch: int, ctx: MethodContext) -> None:
        """Called at the start of every epoch (0-based), before its first step."""

    # -- every step -------------------------------------------------------------------------
    def forward(self, step: Step) -> dict[str, torch.Tensor]:
        """Named loss parts; the training loss is their sum."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Method name and params, as recorded in the model card."""
        return {"method": self.name, "method_params": self.params.model_dump()}


def validate_params(cls: type[CompatLoss], params: dict[str, Any] | None) -> MethodParams:
    try:
        return cls.Params.model_validate(params or {})
    except ValidationError as err:
        raise BadInputError(
            format_validation_error(f"method {cls.name}: method_params", err, params)
        ) from None


# -- shared helpers (align_dims and fit_width live in compat.functional.align) ----------------

__all__ = [
    "CompatLoss",
    "MethodContext",
    "MethodParams",
    "Step",
    "align_dims",
    "fit_width",
    "validate_params",
    "zero",
]


def zero(like: torch.Tensor) -> torch.Tensor:
    """A zero loss that still belongs to the graph (so DDP sees every parameter used)."""
    return like.sum() * 0.0
