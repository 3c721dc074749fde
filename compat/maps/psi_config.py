"""The ``upgrade:`` section of params.yaml: which versions get an upgrade module psi, and how it
is fitted (import-light: pydantic only, no torch).

Example::

    upgrade:
      v2: {from: v1, loss: mse, epochs: 50, lr: 1.0e-3, weight_decay: 0.1,
         batch_size: 256, val_fraction: 0.2, patience: 10, seed: 0}

``from`` defaults to the version's parent (its model card). ``hidden`` defaults to BiCT's ratio,
8x the old embedding's width (4096 for 512-d; 1024 for the default 128-d). Narrower is faster to
apply: see :mod:`compat.maps.psi` for the measured trade-off (1024 was 23-35x cheaper per
item than re-embedding with the small CNN, 256 about 100x).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from compat.names import Name


class UpgradeConfig(BaseModel):
    """How to fit psi for one version; an unknown key is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    from_: Name | None = Field(
        None,
        alias="from",
        description="the version whose galleries psi upgrades; default: the version's parent",
    )
    hidden: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="hidden width d_h; default BiCT's ratio, 8x the old embedding's width "
        "(4096 for 512-d)",
    )
    blocks: int = Field(
        3, ge=1, le=64, description="[Linear-BatchNorm1d-ReLU] blocks before the output"
    )
    loss: Literal["mse", "cosine"] = Field(
        "mse", description="mse: ||psi(old) - new||^2; cosine: 1 - cos(psi(old), new)"
    )
    epochs: int = Field(
        50,
        ge=1,
        le=100_000,
        description="passes over the pairs (3,200 pairs: 20 -> held-out cos 0.80, 100 -> 0.86)",
    )
    lr: float = Field(1e-3, gt=0, le=1000, description="AdamW learning rate (over 1000: a typo)")
    weight_decay: float = Field(
        0.1,
        ge=0,
        description="AdamW (decoupled) weight decay: with residual, shrinkage toward the identity "
        "(docs/findings.md, 'Backfill and psi')",
    )
    batch_size: int = Field(256, ge=2, le=1_000_000)
    seed: int = Field(0, ge=0, le=2**32 - 1, description="random seed (0 .. 2**32 - 1)")
    residual: bool = Field(
        True,
        description="psi(x) = x + MLP(x), the MLP's output layer at zero: the identity at the "
        "start (only where the two versions' dims agree; otherwise the plain MLP)",
    )
    val_fraction: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="held out to pick the epoch and check psi: this share of the classes "
        "(of the rows when there are too few classes or no labels)",
    )
    monitor: Literal["top1", "loss"] = Field(
        "top1",
        description="what picks the best epoch on the held-out pairs: retrieval top-1 (ties "
        "by loss) or the loss (ties by top-1)",
    )
    patience: int | None = Field(
        10,
        ge=1,
        le=100_000,
        description="stop after this many epochs without a better held-out epoch",
    )
    refuse: bool = Field(
        True,
        description="save the identity instead of a psi whose held-out top-1 does not beat "
        "the old gallery left alone, or, where the pipeline has a validation split, whose "
        "M(new, psi(old)) there does not beat M(old, old) as the gate judges (equal dims only)",
    )
    min_gain: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="held-out top-1 psi must add over no upgrade (and, on the validation split, "
        "over M(old, old)) to be kept (below 1: top-1 is a share)",
    )
    confidence: float = Field(
        0.95,
        gt=0,
        lt=1,
        description="psi is kept only if the one-sided lower bound of its held-out top-1 gain "
        "(and of its gain over M(old, old) on the validation split) at this level is above "
        "min_gain (0.5: the gain itself)",
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"

    @model_validator(mode="after")
    def _checkable(self) -> UpgradeConfig:
        if self.refuse and self.val_fraction == 0:
            raise ValueError(
                "val_fraction: 0 holds nothing out, so psi could never be checked; use a share "
                "above 0 (default 0.2), or refuse: false to keep an unchecked psi"
            )
        return self

    threads: int | None = Field(
        None, ge=1, le=4096, description="torch CPU threads (default: torch's)"
    )
    embed_batch_size: int = Field(
        512, ge=1, le=1_000_000, description="images per forward when embedding"
    )

    def dump(self) -> dict[str, object]:
        """The config as params.yaml spells it (``from``, not ``from_``)."""
        return self.model_dump(mode="json", by_alias=True)


# The whole section: new version -> its upgrade config.
UpgradeParams = dict[str, UpgradeConfig]

__all__ = ["UpgradeConfig", "UpgradeParams"]
