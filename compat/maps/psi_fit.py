"""Fit the upgrade module psi of a version (BiCT's forward step; Su et al., "Privacy-Preserving
Model Upgrades with Bidirectional Compatible Training in Image Retrieval").

psi is fitted on pairs (phi_old(x), phi_new(x)) of the *new* version's training images x: the
images the new model learned from, which the team still holds when it trains the new version
(the gallery's images may long be gone). Both embeddings are computed once, in eval mode under
``torch.inference_mode``, L2-normalised exactly as galleries store them
(:func:`compat.embeddings.embed.embed_images`); then only psi trains, with Adam:

- ``mse``:    L = mean_i ||psi(o_i) - n_i||^2            (BiCT's regression form)
- ``cosine``: L = mean_i (1 - cos(psi(o_i), n_i))

psi never makes a gallery worse than leaving it alone (issue: a psi fitted on 2,000 pairs made
the stored gallery worse than no upgrade): where dims agree it starts as the identity (a
residual psi, :class:`~compat.maps.psi.UpgradeModule`), AdamW's weight decay shrinks it
back toward the identity, a seeded ``val_fraction`` of the pairs (whole classes when labels are
known) is held out, every epoch (and the start) is scored there by retrieval (the new version's
held-out embeddings as queries against psi(old) as the gallery, top-1), the best epoch is kept and
fitting stops ``patience`` epochs after it; and a psi whose held-out top-1 gain over the old
gallery left alone is not above ``min_gain`` with ``confidence`` (a one-sided lower bound over
the held-out queries) is *refused*: the identity is saved instead and the card's ``refused``
says why, so evaluate, promote and ``compat backfill`` see "no upgrade". Those held-out
numbers (the split, top-1, the gain's lower bound) are :mod:`compat.maps.psi_heldout`'s; this
module is the loop that uses them, and the ``upgrade`` stage's fit of a version.

That check asks whether psi beats no upgrade, not whether the upgraded gallery beats keeping
the old model, which the gate asks (``serve: backfill``). With a validation split, a psi that
passed is also judged there as the gate judges (:func:`judged`; issue 42).
Runs are deterministic on the CPU for a given seed (deterministic algorithms, seeded init,
seeded shuffling).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from compat.errors import BadInputError, NotFoundError
from compat.maps.psi import UpgradeModule, save_upgrade, upgrade_folder
from compat.maps.psi_config import UpgradeConfig
from compat.maps.psi_heldout import gain_lower_bound, heldout_hits, heldout_split, heldout_top1
from compat.models.card import ModelCard, UpgradeCard, UpgradeRefusal, read_model_card
from compat.names import inside
from compat.train.device import determinism, resolve_device

METRICS = "metrics.json"


@dataclass
class UpgradeData:
    """Where the new version's training images came from (recorded in the card)."""

    split: str
    data_fingerprint: str
    source_fingerprint: str


@dataclass(frozen=True)
class HeldOutSet:
    """The validation split (classes no training set holds): its manifest and its items'
    uint8 images, on which a psi is judged as the gate judges (:func:`judged`)."""

    name: str  # "split:validation"
    manifest: Any  # compat.data.split.EvalManifest
    images: np.ndarray  # uint8 (n, H, W, C), one per manifest item
    fingerprint: str | None = None


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
    psi: UpgradeModule  # the identity when ``refused``
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    seconds: float
    refused: UpgradeRefusal | None = None


def plan_upgrade(version: str, cfg: UpgradeConfig, models_dir: str | Path) -> UpgradePlan:
    """Find both versions' cards and check they can be paired; raise before loading anything."""
    models = Path(models_dir)
    new_dir = models / version
    try:  # models/<version>/upgrade a symlink out of the project
        inside(upgrade_folder(models, version), models)
    except ValueError as err:
        raise BadInputError(f"upgrade.{version}: output folder {err}") from None
    resolve_device(cfg.device, f"upgrade.{version}.device")  # cuda on a machine without it
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
    labels: Sequence[Any] | None = None,
) -> UpgradeFit:
    """Fit psi: (n, d_old) ``old`` -> (n, d_new) ``new`` (rows paired, L2-normalised).

    ``labels`` (one per row) let the held-out pairs be whole classes and their retrieval be
    class retrieval (:func:`compat.maps.psi_heldout.heldout_split`,
    :func:`~compat.maps.psi_heldout.heldout_top1`). Every epoch is scored on the held-out pairs,
    and so is the start (epoch 0: the identity when psi is residual); the best epoch's weights
    are kept (``cfg.monitor``) and fitting stops after ``cfg.patience`` epochs without a better
    one. With equal dims and ``cfg.refuse``, a psi whose held-out top-1 gain over the old
    gallery left alone is not above ``cfg.min_gain`` with ``cfg.confidence``
    (:func:`~compat.maps.psi_heldout.gain_lower_bound`) is refused: the fit returns the identity
    psi and ``refused`` says why."""
    from compat.train.progress import Reporter

    o = torch.as_tensor(np.ascontiguousarray(old, dtype=np.float32))
    t = torch.as_tensor(np.ascontiguousarray(new, dtype=np.float32))
    if o.ndim != 2 or t.ndim != 2 or len(o) != len(t):
        raise BadInputError(
            f"upgrade: pairs: expected two (n, d) arrays of equal n, got {tuple(o.shape)} "
            f"and {tuple(t.shape)}"
        )
    if labels is not None and len(labels) != len(o):
        raise BadInputError(f"upgrade: labels: {len(labels)} labels for {len(o)} pairs")
    if not (torch.isfinite(o).all() and torch.isfinite(t).all()):
        raise BadInputError("upgrade: pairs: NaN or inf in the embeddings")
    seed = cfg.seed if seed is None else seed
    device = resolve_device(cfg.device, "upgrade: device")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)

    fit_rows, val_rows, split_kind = heldout_split(len(o), labels, cfg.val_fraction, seed)
    if len(fit_rows) < 2:
        raise BadInputError(f"upgrade: pairs: {len(fit_rows)} training pair(s); psi needs >= 2")
    fit_idx, val_idx = torch.as_tensor(fit_rows), torch.as_tensor(val_rows)
    val_labels = (
        [labels[i] for i in val_rows] if labels is not None and split_kind == "classes" else None
    )
    n_val = len(val_rows)
    o_fit, t_fit = o[fit_idx].to(device), t[fit_idx].to(device)
    o_val, t_val = o[val_idx].to(device), t[val_idx].to(device)
    same_dim = o.shape[1] == t.shape[1]
    residual = cfg.residual and same_dim

    torch.manual_seed(seed)
    psi = UpgradeModule(o.shape[1], t.shape[1], cfg.hidden, cfg.blocks, residual).to(device)
    opt = torch.optim.AdamW(psi.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(seed)
    n = len(o_fit)
    bs = min(cfg.batch_size, n)
    # A last batch of one row cannot train BatchNorm; every other remainder is used.
    steps = n // bs + (1 if n % bs >= 2 else 0)
    rows: list[dict[str, Any]] = []
    backward = heldout_top1(t_val, o_val, val_labels) if same_dim and n_val else None

    def score(row: dict[str, Any]) -> tuple[float, float]:
        """Higher is better: (top1, -loss) or (-loss, top1) by ``cfg.monitor``; NaN last."""
        top1 = row.get("val_top1")
        loss = row.get("val_loss")
        a = -math.inf if top1 is None or math.isnan(top1) else top1
        b = -math.inf if loss is None or math.isnan(loss) else -loss
        return (a, b) if cfg.monitor == "top1" else (b, a)

    start = {"epoch": 0, **_evaluate(psi, o_val, t_val, cfg.loss, val_labels)}
    best_row, best_state = start, _state(psi)
    since_best = 0
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
            if not math.isfinite(total):  # NaN or inf: psi's weights are already lost
                raise BadInputError(
                    f"upgrade: epoch {epoch + 1}: loss {cfg.loss!r} is not finite (NaN or inf); "
                    "nothing is saved: check lr and the embeddings psi is fitted on"
                )
            secs = time.perf_counter() - t0
            row: dict[str, Any] = {
                "epoch": epoch + 1,
                "loss": total / seen,
                "lr": cfg.lr,
                "seconds": secs,
                "images_per_s": seen / secs if secs > 0 else 0.0,
            }
            row.update(_evaluate(psi, o_val, t_val, cfg.loss, val_labels))
            rows.append(row)
            rep.end_epoch(row)
            if not n_val:  # nothing held out: the last epoch is the fit
                best_row, best_state = row, None
                continue
            if score(row) > score(best_row):
                best_row, best_state, since_best = row, _state(psi), 0
            else:
                since_best += 1
                if cfg.patience is not None and since_best >= cfg.patience:
                    break
    if best_state is not None:
        psi.load_state_dict(best_state)
    psi.eval()
    seconds = time.perf_counter() - started
    summary: dict[str, Any] = {
        "train_loss": rows[best_row["epoch"] - 1]["loss"] if best_row["epoch"] else None,
        **{k: v for k, v in best_row.items() if k.startswith("val_")},
        "best_epoch": best_row["epoch"],
        "epochs_run": len(rows),
        "monitor": cfg.monitor,
        "val_split": split_kind,
        "num_fit": int(n),
        "num_val": int(n_val),
        "seconds": round(seconds, 3),
    }
    refused = None
    if same_dim:
        summary["val_cosine_without_upgrade"] = _mean_cosine(o_val, t_val) if n_val else None
        summary["val_top1_without_upgrade"] = backward
        top1 = best_row.get("val_top1")
        lower = math.nan
        if backward is not None and top1 is not None:
            with torch.inference_mode():
                psi_hits = heldout_hits(t_val, F.normalize(psi(o_val), dim=1), val_labels)
            lower = gain_lower_bound(
                psi_hits, heldout_hits(t_val, o_val, val_labels), cfg.confidence
            )
            summary["val_top1_gain_lower_bound"] = lower
            summary["val_queries"] = len(psi_hits)
        if cfg.refuse and (backward is None or top1 is None):
            # Nothing held out to check psi on: an unchecked psi is not kept.
            refused = UpgradeRefusal(
                reason=(
                    f"no held-out pairs to check psi on (val_fraction {cfg.val_fraction:g} of "
                    f"{len(o)} pairs held out {n_val}); psi is the identity (no upgrade)"
                ),
                metric="top1",
            )
            psi = _identity(o.shape[1], t.shape[1], cfg, seed)
        elif cfg.refuse and lower <= cfg.min_gain:
            refused = UpgradeRefusal(
                reason=(
                    f"held-out top-1 {top1:.4f} with psi against {backward:.4f} without it: the "
                    f"gain's {cfg.confidence:g} lower bound {lower:+.4f} is not above "
                    f"{cfg.min_gain:g} ({len(psi_hits)} queries of held-out {split_kind}); "
                    "psi is the identity (no upgrade)"
                ),
                metric="top1",
                psi=top1,
                backward=backward,
            )
            psi = _identity(o.shape[1], t.shape[1], cfg, seed)
    return UpgradeFit(psi.cpu(), rows, summary, seconds, refused)


def judged(
    fit: UpgradeFit,
    check: HeldOutSet,
    old: np.ndarray,
    new: np.ndarray,
    cfg: UpgradeConfig,
    seed: int,
) -> UpgradeFit:
    """``fit`` judged on ``check`` as the gate judges a gallery served through psi
    (:func:`compat.maps.verdict.check_psi`; ``old``, ``new``: both versions' rows of the set's
    items): the numbers go into the summary (``verdict``), and a psi that fails is refused and
    replaced by the identity, as :func:`fit_upgrade` refuses one. A psi already refused is
    returned as it is; one between spaces of other widths is judged and recorded but kept (no
    identity to fall back on, as :func:`fit_upgrade` never refuses one)."""
    if fit.refused is not None:
        return fit
    from compat.maps.verdict import check_psi

    held, refusal = check_psi(fit.psi, old, new, check, cfg)
    summary = {**fit.summary, "verdict": held.model_dump()}
    if refusal is None or old.shape[1] != new.shape[1]:
        return replace(fit, summary=summary)
    identity = _identity(old.shape[1], new.shape[1], cfg, seed)
    reason = f"{refusal.reason}; psi is the identity (no upgrade)"
    refused = UpgradeRefusal(reason=reason, metric="top1", psi=refusal.mapped)
    return replace(fit, psi=identity, summary=summary, refused=refused)


def _identity(in_dim: int, out_dim: int, cfg: UpgradeConfig, seed: int) -> UpgradeModule:
    """The psi a refusal saves: residual with its branch at zero, so it leaves rows as they are;
    seeded, so its bytes are the same on every run."""
    torch.manual_seed(seed)
    return UpgradeModule(in_dim, out_dim, cfg.hidden, cfg.blocks, True).eval()


def _state(psi: UpgradeModule) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in psi.state_dict().items()}


@torch.inference_mode()
def _evaluate(
    psi: UpgradeModule,
    o_val: torch.Tensor,
    t_val: torch.Tensor,
    kind: str,
    labels: Sequence[Any] | None,
) -> dict[str, float | None]:
    if len(o_val) == 0:
        return {"val_loss": None, "val_cosine": None, "val_top1": None}
    psi.eval()
    out = psi(o_val)
    up = F.normalize(out, dim=1)
    return {
        "val_loss": float(upgrade_loss(out, t_val, kind)),
        "val_cosine": _mean_cosine(up, t_val),
        "val_top1": heldout_top1(t_val, up, labels),
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
    labels: Sequence[Any] | None = None,
    check: HeldOutSet | None = None,
) -> UpgradeCard:
    """Fit psi from ``plan.source`` into ``version`` on uint8 (n, H, W, C) ``images`` (the new
    version's training images); write ``<out_dir>/{weights.safetensors,card.json,metrics.json}``
    (default ``models/<version>/upgrade/``) and return the card. ``labels`` (the images'
    classes) make the held-out pairs whole classes (:func:`fit_upgrade`); ``check`` (the
    validation split) judges a psi that passed as the gate would (:func:`judged`); a refused fit
    writes the identity psi and a card whose ``refused`` says why."""
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
    check_rows = (
        embedding_pairs(parent_model, new_model, np.asarray(check.images), cfg.embed_batch_size,
                        str(device))
        if check is not None
        else None
    )  # fmt: skip
    del parent_model, new_model
    seed = derive_seed(cfg.seed, f"{version}/upgrade")
    if labels is not None and len(labels) != len(arr):
        raise BadInputError(f"upgrade: labels: {len(labels)} labels for {len(arr)} images")
    fit = fit_upgrade(
        old_emb, new_emb, cfg, seed=seed, progress=progress, quiet=quiet, labels=labels
    )
    if check is not None and check_rows is not None:
        fit = judged(fit, check, *check_rows, cfg, seed)

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
        **({"refused": fit.refused.model_dump()} if fit.refused is not None else {}),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json(out / METRICS, {"epochs": fit.rows, "summary": fit.summary})
    return save_upgrade(out, fit.psi, fields)


__all__ = [
    "HeldOutSet",
    "UpgradeData",
    "UpgradeFit",
    "UpgradePlan",
    "embedding_pairs",
    "fit_upgrade",
    "judged",
    "plan_upgrade",
    "train_upgrade",
    "upgrade_loss",
]
