"""``residual-mlp``: BiCT's upgrade module psi, fitted by psi's own loop, between any two spaces.

The map is :class:`compat.maps.psi.UpgradeModule` (Su et al., BiCT: ``blocks`` x
[Linear-BatchNorm1d-ReLU] + Linear; with equal widths psi(x) = x + MLP(x), the MLP's output
layer starting at zero, so an unfitted map is the identity) and it is fitted by
:func:`compat.maps.psi_fit.fit_upgrade`, reused rather than copied: AdamW on
L = mean_i ||psi(x_i) - y_i||^2 (``mse``, BiCT's regression) or mean_i (1 - cos(psi(x_i), y_i))
(``cosine``), the best epoch picked on an inner held-out share of the fit pairs. psi's own
refusal is switched off here: the map's held-out check (:mod:`compat.maps.check`), on pairs the
loop never saw, is the one rule. The loop reads its pairs as (input, target) whatever the
direction, so a query adapter (new -> old) is fitted by the same code as psi (old -> new).

Applied as psi is (:class:`compat.maps.psi.FoldedUpgrade`: BatchNorm folded into the
Linear layers, fixed row blocks, L2-normalised input and output).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from compat.maps.config import Params
from compat.maps.psi import FoldedUpgrade, UpgradeModule


class ResidualMLPParams(Params):
    """Parameters of a ``residual-mlp`` map (psi's, :class:`compat.maps.psi_config.
    UpgradeConfig`, less what the map's check decides)."""

    hidden: int | None = Field(
        None, ge=1, le=65536, description="hidden width; default BiCT's ratio, 8x the input width"
    )
    blocks: int = Field(
        3, ge=1, le=64, description="[Linear-BatchNorm1d-ReLU] blocks before the output"
    )
    residual: bool = Field(
        True, description="psi(x) = x + MLP(x), starting at the identity (equal widths only)"
    )
    loss: Literal["mse", "cosine"] = "mse"
    epochs: int = Field(50, ge=1, le=100_000, description="passes over the fit pairs")
    lr: float = Field(1e-3, gt=0, le=1000, description="AdamW learning rate")
    weight_decay: float = Field(0.1, ge=0, description="AdamW decoupled weight decay")
    batch_size: int = Field(256, ge=2, le=1_000_000)
    patience: int | None = Field(
        10, ge=1, le=100_000, description="epochs without a better inner epoch"
    )
    inner_fraction: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="share of the fit pairs the loop holds out to pick its best epoch",
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = Field(
        None, ge=1, le=4096, description="torch CPU threads (default: torch's)"
    )


def fit(
    x: np.ndarray,
    y: np.ndarray,
    params: ResidualMLPParams,
    *,
    labels: Sequence[Any] | None = None,
    seed: int = 0,
) -> FoldedUpgrade:
    """psi fitted from ``x`` to ``y`` by :func:`compat.maps.psi_fit.fit_upgrade`."""
    from compat.maps.psi_config import UpgradeConfig
    from compat.maps.psi_fit import fit_upgrade

    cfg = UpgradeConfig(
        hidden=params.hidden, blocks=params.blocks, residual=params.residual, loss=params.loss,
        epochs=params.epochs, lr=params.lr, weight_decay=params.weight_decay,
        batch_size=params.batch_size, patience=params.patience, seed=seed, refuse=False,
        val_fraction=params.inner_fraction, device=params.device, threads=params.threads,
    )  # fmt: skip
    result = fit_upgrade(x, y, cfg, seed=seed, quiet=True, progress=False, labels=labels)
    return _Fitted(result.psi.eval())


class _Fitted(FoldedUpgrade):
    """psi's fast path that also keeps the module, whose state is what is saved."""

    def __init__(self, psi: UpgradeModule, device: str = "cpu") -> None:
        super().__init__(psi, device)
        self.psi = psi

    def state(self) -> dict[str, Any]:
        return {k: v.detach().cpu() for k, v in self.psi.state_dict().items()}

    def shape(self) -> dict[str, Any]:
        """What the card records so the module can be built again before loading its state."""
        return {"hidden": self.psi.hidden, "blocks": self.psi.blocks, "residual": self.psi.residual}


def from_state(
    state: dict[str, Any], in_dim: int, out_dim: int, params: dict[str, Any], device: str
) -> FoldedUpgrade:
    """The map of saved tensors; ValueError when they do not fit the card's shape."""
    psi = UpgradeModule(
        in_dim, out_dim, params.get("hidden"), int(params.get("blocks", 3)),
        residual=bool(params.get("residual", False)),
    )  # fmt: skip
    try:
        psi.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ValueError((str(err).splitlines() or ["state mismatch"])[0]) from None
    return _Fitted(psi.eval(), device)


__all__ = ["ResidualMLPParams", "fit", "from_state"]
