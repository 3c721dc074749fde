"""Fit the upgrade module psi of a version (BiCT's forward step; Su et al., "Privacy-Preserving
Model Upgrades with Bidirectional Compatible Training in Image Retrieval").

psi is fitted on pairs (phi_old(x), phi_new(x)) of the *new* version's training images x: the
images the new model learned from, which the team still holds when it trains the new version
(the gallery's images may long be gone). Both embeddings are computed once, in eval mode under
``torch.inference_mode``, L2-normalised exactly as galleries store them
(:func:`compat.embeddings.embed.embed_images`); then only psi trains, with Adam:

- ``mse``:    L = mean_i ||psi(o_i) - n_i||^2            (BiCT's regression form)
- ``cosine``: L = mean_i (1 - cos(psi(o_i), n_i))

A seeded ``val_fraction`` of the pairs is held out; the card reports their mean cosine after
the upgrade next to the cosine without it (old rows used as they are, when dims agree).
Runs are deterministic on the CPU for a given seed (deterministic algorithms, seeded init,
seeded shuffling).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from compat.errors import BadInputError, NotFoundError
from compat.models.card import ModelCard, UpgradeCard, read_model_card
from compat.models.upgrade import UpgradeModule, save_upgrade, upgrade_folder
from compat.train.device import determinism, resolve_device
from compat.train.upgrade_config import UpgradeConfig

METRICS = "metrics.json"


@dataclass
class UpgradeData:
    """Where the new version's training images came from (recorded in the card)."""

    split: str
    data_fingerprint: str
    source_fingerprint: str


@dataclass
class UpgradePlan:
    """Everything decided before any image or weight loads."""

    version: str
    source: str  # the version psi upgrades from
    new_dir: Path
    parent_dir: Path
    new_card: ModelCard
    parent_card: ModelCard


@dataclass
class UpgradeFit:
    psi: UpgradeModule
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    seconds: float


def plan_upgrade(version: str, cfg: UpgradeConfig, models_dir: str | Path) -> UpgradePlan:
    """Find both versions' cards and check they can be paired; raise before loading anything."""
    models = Path(models_dir)
    new_dir = models / version
    new_card = read_model_card(new_dir)
    source = cfg.from_ or new_card.parent
    if not source:
        raise BadInputError(
            f"upgrade.{version}.from: {version} has no parent in its card; name the version "
            "whose galleries psi upgrades"
        )
    if source == version:
        raise BadInputError(f"upgrade.{version}.from: psi cannot upgrade {version} into itself")
    parent_dir = models / source
    if not (parent_dir / "card.json").is_file():
        raise NotFoundError(f"{parent_dir}: version {source!r} not found (no card.json)")
    parent_card = read_model_card(parent_dir)
    for key in ("in_channels", "image_size"):
        theirs, ours = getattr(parent_card, key), getattr(new_card, key)
        if theirs != ours:
            raise BadInputError(
                f"{parent_dir / 'card.json'}: {key}: {source} takes {theirs}, "
                f"{version} takes {ours}; psi pairs embeddings of the same images"
            )
    return UpgradePlan(version, source, new_dir, parent_dir, new_card, parent_card)


def embedding_pairs(
    parent: torch.nn.Module,
    new: torch.nn.Module,
    images: np.ndarray,
    batch_size: int = 512,
    device: str | torch.device | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(old, new) L2-normalised float32 embeddings of uint8 ``images``, each computed once."""
    from compat.embeddings.embed import embed_images

    return (
        embed_images(parent, images, batch_size, device),
        embed_images(new, images, batch_size, device),
    )


def upgrade_loss(out: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """The regression loss between psi's raw outputs and the new embeddings (unit vectors)."""
    if kind == "mse":
        return (out - target).pow(2).sum(dim=1).mean()
    if kind == "cosine":
        return (1.0 - F.cosine_similarity(out, target, dim=1)).mean()
    raise BadInputError(f"upgrade: loss: unknown {kind!r}; known: mse, cosine")


def _mean_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(F.cosine_similarity(a, b, dim=1).mean()) if len(a) else float("nan")


def fit_upgrade(
    old: np.ndarray,
    new: np.ndarray,
    cfg: UpgradeConfig,
    *,
    seed: int | None = None,
    progress: bool | None = None,
    quiet: bool = False,
) -> UpgradeFit:
    """Fit psi: (n, d_old) ``old`` -> (n, d_new) ``new`` (rows paired, L2-normalised)."""
    from compat.train.progress import Reporter

    o = torch.as_tensor(np.ascontiguousarray(old, dtype=np.float32))
    t = torch.as_tensor(np.ascontiguousarray(new, dtype=np.float32))
    if o.ndim != 2 or t.ndim != 2 or len(o) != len(t):
        raise BadInputError(
            f"upgrade: pairs: expected two (n, d) arrays of equal n, got {tuple(o.shape)} "
            f"and {tuple(t.shape)}"
        )
    if not (torch.isfinite(o).all() and torch.isfinite(t).all()):
        raise BadInputError("upgrade: pairs: NaN or inf in the embeddings")
    seed = cfg.seed if seed is None else seed
    device = resolve_device(cfg.device, "upgrade: device")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)

    order = np.random.default_rng([seed, 0xB1C7]).permutation(len(o))
    n_val = round(cfg.val_fraction * len(o)) if len(o) > 2 else 0
    val_idx, fit_idx = torch.as_tensor(order[:n_val]), torch.as_tensor(order[n_val:])
    if len(fit_idx) < 2:
        raise BadInputError(f"upgrade: pairs: {len(fit_idx)} training pair(s); psi needs >= 2")
    o_fit, t_fit = o[fit_idx].to(device), t[fit_idx].to(device)
    o_val, t_val = o[val_idx].to(device), t[val_idx].to(device)

    torch.manual_seed(seed)
    psi = UpgradeModule(o.shape[1], t.shape[1], cfg.hidden, cfg.blocks).to(device)
    opt = torch.optim.Adam(psi.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(seed)
    n = len(o_fit)
    bs = min(cfg.batch_size, n)
    # A last batch of one row cannot train BatchNorm; every other remainder is used.
    steps = n // bs + (1 if n % bs >= 2 else 0)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with determinism(True, device), Reporter(cfg.epochs, progress, quiet) as rep:
        for epoch in range(cfg.epochs):
            rep.start_epoch(epoch, steps)
            psi.train()
            perm = torch.randperm(n, generator=gen).to(device)
            t0, total, seen = time.perf_counter(), 0.0, 0
            for step in range(steps):
                idx = perm[step * bs : (step + 1) * bs]
                loss = upgrade_loss(psi(o_fit[idx]), t_fit[idx], cfg.loss)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
                seen += len(idx)
                rep.update(step + 1, {"loss": total / seen}, seen / (time.perf_counter() - t0))
            secs = time.perf_counter() - t0
            row: dict[str, Any] = {
                "epoch": epoch + 1,
                "loss": total / seen,
                "lr": cfg.lr,
                "seconds": secs,
                "images_per_s": seen / secs if secs > 0 else 0.0,
            }
            row.update(_evaluate(psi, o_val, t_val, cfg.loss))
            rows.append(row)
            rep.end_epoch(row)
    psi.eval()
    seconds = time.perf_counter() - started
    summary = {
        "train_loss": rows[-1]["loss"],
        **{k: v for k, v in rows[-1].items() if k.startswith("val_")},
        "num_fit": int(n),
        "num_val": int(n_val),
        "seconds": round(seconds, 3),
    }
    if o.shape[1] == t.shape[1]:
        summary["val_cosine_without_upgrade"] = _mean_cosine(o_val, t_val) if n_val else None
    return UpgradeFit(psi.cpu(), rows, summary, seconds)


@torch.inference_mode()
def _evaluate(
    psi: UpgradeModule, o_val: torch.Tensor, t_val: torch.Tensor, kind: str
) -> dict[str, float | None]:
    if len(o_val) == 0:
        return {"val_loss": None, "val_cosine": None}
    psi.eval()
    out = psi(o_val)
    return {
        "val_loss": float(upgrade_loss(out, t_val, kind)),
        "val_cosine": _mean_cosine(F.normalize(out, dim=1), t_val),
    }


def train_upgrade(
    version: str,
    cfg: UpgradeConfig,
    images: np.ndarray,
    data: UpgradeData,
    *,
    models_dir: str | Path = "models",
    out_dir: str | Path | None = None,
    plan: UpgradePlan | None = None,
    progress: bool | None = None,
    quiet: bool = False,
) -> UpgradeCard:
    """Fit psi from ``plan.source`` into ``version`` on uint8 (n, H, W, C) ``images`` (the new
    version's training images); write ``<out_dir>/{weights.safetensors,card.json,metrics.json}``
    (default ``models/<version>/upgrade/``) and return the card."""
    from compat.data.transforms import TRANSFORM_ID
    from compat.io import fingerprint, write_json
    from compat.models.version import load_version, package_versions
    from compat.train.run import derive_seed

    plan = plan or plan_upgrade(version, cfg, models_dir)
    trained_on = plan.new_card.data_fingerprint
    if trained_on and trained_on != data.data_fingerprint:
        raise BadInputError(
            f"splits/{data.split}.json: fingerprint {data.data_fingerprint}, but {version} was "
            f"trained on {trained_on}; re-run train@{version} (psi must see {version}'s images)"
        )
    arr = np.asarray(images)
    if arr.ndim != 4 or arr.dtype != np.uint8 or len(arr) < 2:
        raise BadInputError(
            f"images: expected uint8 (n >= 2, H, W, C), got {arr.dtype} {tuple(arr.shape)}"
        )
    device = resolve_device(cfg.device, "upgrade: device")
    parent_model, parent_card = load_version(plan.parent_dir)
    new_model, new_card = load_version(plan.new_dir)
    old_emb, new_emb = embedding_pairs(
        parent_model, new_model, arr, cfg.embed_batch_size, str(device)
    )
    del parent_model, new_model
    seed = derive_seed(cfg.seed, f"{version}/upgrade")
    fit = fit_upgrade(old_emb, new_emb, cfg, seed=seed, progress=progress, quiet=quiet)

    out = Path(out_dir) if out_dir is not None else upgrade_folder(models_dir, version)
    # Every field but psi's shape, kind, schema and digest, which save_upgrade adds.
    fields: dict[str, Any] = {
        "from": plan.source,
        "to": version,
        "from_weights_sha256": parent_card.weights_sha256,
        "to_weights_sha256": new_card.weights_sha256,
        "loss": cfg.loss,
        "split": data.split,
        "data_fingerprint": data.data_fingerprint,
        "source_fingerprint": data.source_fingerprint,
        "pairs_fingerprint": fingerprint(
            {
                "from": parent_card.weights_sha256,
                "to": new_card.weights_sha256,
                "data": data.data_fingerprint,
                "source": data.source_fingerprint,
                "transform": TRANSFORM_ID,
                "n": len(arr),
            }
        ),
        "transform": TRANSFORM_ID,
        "num_pairs": len(arr),
        "seed": cfg.seed,
        "effective_seed": seed,
        "config": cfg.dump(),
        "metrics": fit.summary,
        "training_seconds": round(fit.seconds, 3),
        "device": str(device),
        "packages": package_versions(),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json(out / METRICS, {"epochs": fit.rows, "summary": fit.summary})
    return save_upgrade(out, fit.psi, fields)


__all__ = [
    "UpgradeData",
    "UpgradeFit",
    "UpgradePlan",
    "embedding_pairs",
    "fit_upgrade",
    "plan_upgrade",
    "train_upgrade",
    "upgrade_loss",
]
