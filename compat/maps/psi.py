"""psi, the upgrade module: BiCT's forward step (Su et al., "Privacy-Preserving Model Upgrades
with Bidirectional Compatible Training in Image Retrieval"), compat's first gallery map.

psi maps a stored gallery embedding of the old version into the new version's space without the
image: ``psi(phi_old(x)) ~ phi_new(x)``. Architecture (BiCT, and FCT's transformation is similar):
``blocks`` x [Linear -> BatchNorm1d -> ReLU] followed by a Linear, hidden width ``hidden``.
BiCT uses d_h = 4096 on 512-d embeddings; compat's default keeps that ratio,
:data:`BICT_RATIO` x the old embedding's width (:func:`default_hidden`: 1024 for the default
128-d embeddings). Width costs speed: ``benchmarks/bench_backfill.py`` measured, per item against
the pipeline's small CNN at 32 px on 2 shared cores (two runs), psi 256 wide 105-106x faster than
re-embedding, 512 55-102x, 1024 23-35x, 4096 2-4x (nearly as slow as the backbone it replaces).
Set ``hidden`` per version to trade fidelity for backfill speed.

**Identity at the start** (``residual``, when ``in_dim == out_dim``): psi(x) = x + f(x) with f the
MLP above and f's output Linear initialised at zero, so an unfitted psi is exactly the identity
and fitting moves it away from "leave the gallery alone" only as far as the pairs justify (the
ReZero / Fixup idea: a residual branch that starts at zero; Bachlechner et al. 2020, Zhang et al.
2019). Weight decay on f is then shrinkage toward the identity, and a psi the upgrade stage
refuses is saved as this identity (:mod:`compat.maps.psi_fit`). Cards without ``residual``
(written before it existed) load the plain MLP.

Inputs and outputs are L2-normalised, as galleries store them: :meth:`UpgradeModule.upgrade`
normalises its input (:func:`compat.models.norms.normalize_rows`: rows of any finite scale, 1e20
or 1e-30, reach unit length; ordinary rows get the bits of ``F.normalize``), applies psi and
normalises the result. :func:`upgrade_array` is the fast inference path (BatchNorm folded into the preceding Linear, in-place ReLU, fixed row blocks:
:mod:`compat.models.rowblocks`) and is tested against the plain eval-mode module.

On disk psi lives in ``models/<new version>/upgrade/``: ``weights.safetensors`` plus
``card.json`` naming the ``from`` and ``to`` versions, both versions' weights sha256, the data it
was fitted on and its own weights' sha256 (checked on every load).

As a map between embedding spaces psi is a :class:`Psi` (role ``gallery-map``), what
:func:`compat.maps.open_map` returns for such a folder: the same interface as a
:class:`compat.maps.store.Map`, so backfill, the gate, the CLI and the evaluate stage apply
either without asking which it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from compat.errors import BadInputError
from compat.io import atomic_path, sha256_bytes
from compat.maps.space import Joins, SpaceMap
from compat.models.card import (
    CARD_SCHEMA,
    UPGRADE_KIND,
    UpgradeCard,
    check_upgrade,
    read_upgrade_card,
    write_upgrade_card,
)
from compat.models.norms import normalize_rows
from compat.models.rowblocks import GPU_ROW_BLOCK, ROW_BLOCK, map_rows
from compat.models.version import read_verified

UPGRADE_DIR = "upgrade"
WEIGHTS = "weights.safetensors"
BICT_RATIO = 8  # BiCT: d_h = 4096 for 512-d embeddings


def default_hidden(in_dim: int) -> int:
    """psi's default hidden width: BiCT's ratio (4096 / 512) times the old embedding's width."""
    return BICT_RATIO * in_dim


class UpgradeModule(nn.Module):
    """psi: ``blocks`` x [Linear-BatchNorm1d-ReLU] + Linear, ``in_dim`` -> ``out_dim``; with
    ``residual`` (equal dims only) psi(x) = x + that MLP, whose output Linear starts at zero."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: int | None = None,
        blocks: int = 3,
        residual: bool = False,
    ) -> None:
        super().__init__()
        hidden = default_hidden(in_dim) if hidden is None else hidden
        if min(in_dim, out_dim, hidden, blocks) < 1:
            raise ValueError("in_dim, out_dim, hidden and blocks must be >= 1")
        if residual and in_dim != out_dim:
            raise ValueError(f"a residual psi needs in_dim == out_dim, got {in_dim} -> {out_dim}")
        self.in_dim, self.out_dim, self.hidden, self.blocks = in_dim, out_dim, hidden, blocks
        self.residual = residual
        layers: list[nn.Module] = []
        width = in_dim
        for _ in range(blocks):
            layers += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True)]
            width = hidden
        layers.append(nn.Linear(width, out_dim))
        self.net = nn.Sequential(*layers)
        if residual:  # the residual branch starts at zero: psi is the identity until fitted
            nn.init.zeros_(layers[-1].weight)
            nn.init.zeros_(layers[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(n, in_dim) -> (n, out_dim) raw outputs (what the training loss sees)."""
        return x + self.net(x) if self.residual else self.net(x)

    def upgrade(self, x: torch.Tensor) -> torch.Tensor:
        """Stored (L2-normalised) old embeddings -> L2-normalised embeddings in the new space."""
        return F.normalize(self.forward(normalize_rows(x.float())), dim=1)

    def folded(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(W, b) per Linear with each eval-mode BatchNorm folded in: y = x W^T + b.

        BN(x W^T + b) = (x W^T + b - mu) * g / sqrt(var + eps) + beta, so the folded layer has
        W' = W * s[:, None] and b' = (b - mu) * s + beta with s = g / sqrt(var + eps).
        """
        mods = list(self.net)
        out = []
        i = 0
        while i < len(mods):
            lin = mods[i]
            assert isinstance(lin, nn.Linear)
            w, b = lin.weight.detach().float(), lin.bias.detach().float()
            if i + 1 < len(mods) and isinstance(mods[i + 1], nn.BatchNorm1d):
                bn = mods[i + 1]
                assert bn.running_mean is not None and bn.running_var is not None
                s = bn.weight.detach().float() / torch.sqrt(bn.running_var.float() + bn.eps)
                w = w * s[:, None]
                b = (b - bn.running_mean.float()) * s + bn.bias.detach().float()
                i += 3  # Linear, BatchNorm1d, ReLU
            else:
                i += 1
            out.append((w.contiguous(), b.contiguous()))
        return out


class FoldedUpgrade:
    """The eval-mode psi as plain matrix products (the fast path of :func:`upgrade_array`).

    :meth:`apply` is the one way compat applies psi to stored rows (the evaluate stage, the
    gate, ``compat backfill`` on every engine): over fixed row blocks
    (:func:`compat.models.rowblocks.map_rows`), so a row's result does not depend on how the rows
    around it were batched."""

    def __init__(self, psi: UpgradeModule, device: str | torch.device = "cpu") -> None:
        self.layers = [(w.to(device), b.to(device)) for w, b in psi.folded()]
        self.in_dim, self.out_dim = psi.in_dim, psi.out_dim
        self.residual = psi.residual
        self.device = torch.device(device)
        # A GPU runs a whole product per kernel launch: small blocks would only add launches.
        self.block = ROW_BLOCK if self.device.type == "cpu" else GPU_ROW_BLOCK

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """psi over the rows of ``x`` as one product (its result depends on ``len(x)``: use
        :meth:`apply` for stored rows)."""
        x0 = normalize_rows(x.to(self.device, torch.float32))
        h = x0
        last = len(self.layers) - 1
        for i, (w, b) in enumerate(self.layers):
            h = torch.addmm(b, h, w.T)
            if i < last:
                h.clamp_(min=0.0)  # ReLU, in place
        if self.residual:
            h.add_(x0)
        return F.normalize(h, dim=1)

    def _block(self, rows: np.ndarray) -> np.ndarray:
        return self(torch.from_numpy(rows)).cpu().numpy()

    def apply(self, x: np.ndarray, start: int = 0) -> np.ndarray:
        """psi over (n, in_dim) rows that are rows ``start ..`` of a gallery: float32
        (n, out_dim), L2-normalised; each row the same whatever ``start`` and ``n`` the caller
        batches by (row ``r`` is computed in the fixed block of rows ``r // block * block ..``)."""
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise BadInputError(
                f"embeddings: psi expects (n, {self.in_dim}) rows, got shape {tuple(x.shape)}"
            )
        return map_rows(self._block, x, start=start, out_dim=self.out_dim, block=self.block)


def upgrade_array(
    psi: UpgradeModule | FoldedUpgrade,
    embeddings: np.ndarray,
    device: str | torch.device = "cpu",
    *,
    start: int = 0,
) -> np.ndarray:
    """psi applied to (n, in_dim) stored embeddings: float32 (n, out_dim), L2-normalised
    (:meth:`FoldedUpgrade.apply`; ``start``: the first row's index in its gallery)."""
    fast = psi if isinstance(psi, FoldedUpgrade) else FoldedUpgrade(psi, device)
    return fast.apply(np.asarray(embeddings), start)


# --------------------------------------------------------------------------- on disk


def upgrade_folder(models_dir: str | Path, version: str) -> Path:
    """Where the psi that upgrades galleries *into* ``version`` lives."""
    return Path(models_dir) / version / UPGRADE_DIR


def save_upgrade(out_dir: str | Path, psi: UpgradeModule, fields: dict[str, Any]) -> UpgradeCard:
    """Write weights then card (each atomically); return the card.

    ``fields`` are the card's provenance (``from``, ``to``, data, metrics...); this sets the
    kind, schema, psi's shape and its weights' digest, and checks the card before writing.
    """
    from safetensors.torch import save

    out = Path(out_dir)
    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in psi.state_dict().items()}
    # One metadata key only: safetensors writes metadata from a hash map whose order varies
    # between saves, and the digest must depend on the tensors alone.
    blob = save(state, metadata={"format": "pt"})
    card = UpgradeCard.model_validate(
        {
            **fields,
            "kind": UPGRADE_KIND,
            "schema": CARD_SCHEMA,
            "in_dim": psi.in_dim,
            "out_dim": psi.out_dim,
            "hidden": psi.hidden,
            "blocks": psi.blocks,
            "residual": psi.residual,
            "weights_sha256": sha256_bytes(blob),
        }
    )
    with atomic_path(out / WEIGHTS) as tmp:
        tmp.write_bytes(blob)
    write_upgrade_card(out, card)  # last: a half-finished save has no card and is never loaded
    return card


def load_upgrade(path: str | Path) -> tuple[UpgradeModule, UpgradeCard]:
    """(psi in eval mode, card) from an upgrade folder; the weights' sha256 must match the card."""
    from safetensors.torch import load

    folder = Path(path)
    card = read_upgrade_card(folder)
    weights = folder / WEIGHTS
    blob = read_verified(weights, card.weights_sha256, "upgrade module weights")
    try:
        psi = UpgradeModule(
            card.in_dim, card.out_dim, card.hidden, card.blocks, residual=bool(card.residual)
        )
    except ValueError as err:  # e.g. residual with two widths: the card contradicts itself
        raise BadInputError(f"{folder / 'card.json'}: residual: {err}") from None
    try:
        psi.load_state_dict(load(blob), strict=True)
    except Exception as err:
        first = (str(err).splitlines() or ["state mismatch"])[0]
        raise BadInputError(f"{weights}: weights do not fit the card's shape: {first}") from None
    return psi.eval(), card


# --------------------------------------------------------------------------- as a map


class Psi(SpaceMap):
    """psi opened as a map between spaces (:class:`compat.maps.space.SpaceMap`): its upgrade
    card and the folded module (:class:`FoldedUpgrade`), role ``gallery-map``. A refused psi is
    served: its weights are the identity the upgrade stage saved ("no upgrade")."""

    card: UpgradeCard
    serves_refused = True

    @property
    def role(self) -> str:
        return "gallery-map"  # old rows into the new space

    @property
    def held_out_lower_bound(self) -> float | None:
        """The lower bound of psi's held-out top-1 gain that decided whether it was kept."""
        return (self.card.metrics or {}).get("val_top1_gain_lower_bound")

    def _check_joins(self, joins: Joins, in_dim: int | None, rows_of: str) -> None:
        """The versions and weights psi's card records, and the rows' width
        (:func:`compat.models.card.check_upgrade`: its messages)."""
        check_upgrade(
            self.card, self.where, target=self.card.to if joins.target is None else joins.target,
            source=joins.source, wanted=joins.wanted, from_weights=joins.from_weights,
            to_weights=joins.to_weights, weights_origin=joins.weights_origin, in_dim=in_dim,
            rows_of=rows_of, rerun=joins.rerun,
        )  # fmt: skip


def open_psi(folder: str | Path, device: str | torch.device = "cpu") -> Psi:
    """psi in ``folder`` as a :class:`Psi` (:func:`load_upgrade`: sha256 checked)."""
    psi, card = load_upgrade(folder)
    return Psi(card, FoldedUpgrade(psi, device), Path(folder))


__all__ = [
    "BICT_RATIO",
    "UPGRADE_DIR",
    "FoldedUpgrade",
    "Psi",
    "UpgradeModule",
    "default_hidden",
    "load_upgrade",
    "open_psi",
    "read_upgrade_card",
    "save_upgrade",
    "upgrade_array",
    "upgrade_folder",
]
