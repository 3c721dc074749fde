"""Train one version end to end: check everything, load data and parent, fit, write the version.

:func:`train_version` reads from a data Source and a TrainManifest; :func:`train_arrays` is the
same with the images already in memory (what tests and benchmarks call). Every check that can
fail (unknown names, method params, a missing or tampered parent, a method that cannot work with
the parent) runs before the first image is loaded.

Seeds: a version's effective seed mixes ``seed`` with the version name, so two versions never
share an initialisation by accident (docs/findings.md: an independent model initialised like its
parent reached 8.8% cross-test top-1 instead of chance: shared initialisation leaks compatibility).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from compat.errors import BadInputError, NotFoundError
from compat.io import fingerprint
from compat.models.card import ModelCard, read_model_card
from compat.names import inside, name_problem
from compat.train.config import TrainConfig
from compat.train.init import check_init, resolve_init

METRICS = "train_metrics.json"


class SourceLike(Protocol):
    fingerprint: str
    image_size: int
    channels: int

    def load(self, ids: Sequence[str]) -> np.ndarray: ...


class ManifestLike(Protocol):
    name: str
    fingerprint: str
    source_fingerprint: str
    classes: list[str]
    items: list[str]
    labels: list[str]


@dataclass
class DataInfo:
    """Where the training data came from (recorded in the card)."""

    split: str
    data_fingerprint: str
    source_fingerprint: str
    classes: list[str]  # the manifest's sorted class names


def derive_seed(seed: int, version: str) -> int:
    """The effective seed of ``version``: stable, and different for every version name."""
    digest = hashlib.sha256(f"{seed}:{version}".encode()).hexdigest()
    return int(digest[:8], 16) & 0x7FFFFFFF


def class_order(classes: Sequence[str], head: str, parent_card: ModelCard | None) -> list[str]:
    """The head's class order: the manifest's, except that a dsimplex head extends its parent's.

    A d-Simplex vertex is a class's identity across versions, so classes the parent knew keep
    their vertex (index) and new classes take the next free ones, in the manifest's order (the
    order the scenario introduced them: a class-incremental task's classes follow the earlier
    tasks', so a model replacement that starts from a pre-trained model gives every task class
    the vertex the fine-tuned chain gave it).
    """
    if head != "dsimplex" or parent_card is None or parent_card.head != "dsimplex":
        return list(classes)
    inherited = parent_card.class_names
    known = set(inherited)
    return inherited + [c for c in classes if c not in known]


def _parent_folder(models_dir: Path, parent: str) -> Path:
    folder = models_dir / parent
    if not (folder / "card.json").is_file():
        raise NotFoundError(f"{folder}: parent version {parent!r} not found (no card.json)")
    return folder


def _check_names(cfg: TrainConfig) -> None:
    from compat.losses import LOSSES
    from compat.models.backbones import BACKBONES
    from compat.models.heads import HEADS

    BACKBONES.get(cfg.backbone)
    HEADS.get(cfg.head)
    LOSSES.get(cfg.method)


@dataclass
class Plan:
    """Everything decided before training: what to build and against which parent."""

    cfg: TrainConfig
    version: str
    loss: Any
    parent_card: ModelCard | None
    parent_dir: Path | None
    init: str = "scratch"  # what cfg.init resolved to: "scratch" | "parent"
    init_reason: str | None = None  # why, when cfg.init is "auto"


def plan_run(version: str, cfg: TrainConfig, models_dir: Path) -> Plan:
    """Validate names, method params and the parent; raise before any data or weights load."""
    from compat.losses import create_loss

    problem = name_problem(version)
    if problem:
        raise BadInputError(f"train.{version}: {problem}")
    try:
        inside(models_dir / version, models_dir)
    except ValueError as err:  # models/<version> a symlink out of the project
        raise BadInputError(f"train.{version}: output folder {err}") from None
    from compat.train.device import resolve_device

    resolve_device(cfg.device, f"train.{version}.device")  # cuda on a machine without it
    _check_names(cfg)
    loss = create_loss(cfg.method, cfg.method_params)
    parent_card, parent_dir = None, None
    if cfg.parent is not None:
        if cfg.parent == version:
            raise BadInputError(f"train.{version}.parent: a version cannot be its own parent")
        parent_dir = _parent_folder(models_dir, cfg.parent)
        parent_card = read_model_card(parent_dir).named(cfg.parent)
    loss.check(parent_card, head=cfg.head, dim=cfg.dim)
    check_init(version, cfg, parent_card)
    init, init_reason = resolve_init(cfg, parent_card, loss.fine_tune_by_default)
    if loss.init_from_parent and parent_card is not None:
        for key in ("backbone", "pooling", "neck"):
            theirs = getattr(parent_card, key)
            if theirs != getattr(cfg, key):
                raise BadInputError(
                    f"method {cfg.method}: init_from_parent needs the parent's {key} "
                    f"({theirs}), got {getattr(cfg, key)}"
                )
    starts_from_parent = init == "parent" or (loss.init_from_parent and parent_card is not None)
    if cfg.bn_stats == "frozen" and not starts_from_parent:
        raise BadInputError(
            f"train.{version}.bn_stats: frozen keeps the starting model's BatchNorm statistics, "
            f"and this version does not start from its parent's weights (init: {init}); "
            "use bn_stats: update"
        )
    return Plan(cfg, version, loss, parent_card, parent_dir, init, init_reason)


def checkpoint_folder(version: str, checkpoint_dir: str | Path | None = None) -> Path:
    """Where ``version``'s epoch checkpoints go (default ``cache/checkpoints/<version>``); a
    folder that is a symlink out of its parent is a BadInputError: a name must not lead out."""
    ckpt = (
        Path(checkpoint_dir) if checkpoint_dir is not None else Path("cache/checkpoints") / version
    )
    try:
        inside(ckpt, ckpt.parent)
    except ValueError as err:
        raise BadInputError(f"train.{version}: checkpoint folder {err}") from None
    return ckpt


def train_arrays(
    version: str,
    cfg: TrainConfig,
    images: np.ndarray | torch.Tensor,
    labels: Sequence[str],
    data: DataInfo,
    *,
    models_dir: str | Path = "models",
    out_dir: str | Path | None = None,
    checkpoint_dir: str | Path | None = None,
    keep_checkpoint: bool = False,
    progress: bool | None = None,
    quiet: bool = False,
    on_epoch_end: Callable[[int, dict[str, Any]], None] | None = None,
    plan: Plan | None = None,
) -> ModelCard | None:
    """Train ``version`` on uint8 (N, H, W, C) ``images`` with class-name ``labels``; write
    ``<out_dir>/weights.safetensors``, ``card.json`` and ``train_metrics.json``; return the card (None on a torchrun worker other
    than rank 0, which writes nothing)."""
    from compat.data.transforms import TRANSFORM_ID
    from compat.models.embedding import build_embedding_model
    from compat.models.heads import create_head
    from compat.models.parent import FrozenParent
    from compat.models.version import save_version
    from compat.train.device import resolve_device
    from compat.train.fit import fit

    models_dir = Path(models_dir)
    out = Path(out_dir) if out_dir is not None else models_dir / version
    plan = plan or plan_run(version, cfg, models_dir)
    loss, parent_card = plan.loss, plan.parent_card
    images_t = torch.as_tensor(images)
    if images_t.dtype != torch.uint8 or images_t.ndim != 4:
        raise BadInputError(
            f"images must be uint8 (n, H, W, C), got {images_t.dtype} {tuple(images_t.shape)}"
        )
    if len(labels) != len(images_t):
        raise BadInputError(f"{len(images_t)} images but {len(labels)} labels")
    n, h, w, channels = images_t.shape
    if h != w:
        raise BadInputError(f"images must be square, got {h}x{w}")

    classes = class_order(data.classes, cfg.head, parent_card)
    index = {c: i for i, c in enumerate(classes)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise BadInputError(f"labels not in the class list: {unknown[:5]}")
    targets = torch.tensor([index[c] for c in labels], dtype=torch.long)
    new = None
    if cfg.sampler == "balanced":
        from compat.train.sampler import new_items

        parent_classes = None if parent_card is None else parent_card.class_names
        new = new_items(labels, data.classes, cfg.new_classes, parent_classes, f"train.{version}")

    seed = derive_seed(cfg.seed, version)
    torch.manual_seed(seed)
    model = build_embedding_model(
        cfg.backbone,
        cfg.dim,
        in_channels=channels,
        image_size=h,
        pooling=cfg.pooling,
        backbone_weights=cfg.backbone_weights,
        neck=cfg.neck,
    )
    head = create_head(cfg.head, cfg.dim, len(classes), **cfg.head_params())

    device = resolve_device(cfg.device)
    parent = None
    uses_parent = loss.needs_parent_forward or loss.needs_parent_head or loss.requires_parent
    if plan.parent_dir is not None and uses_parent:
        parent = FrozenParent.load(
            plan.parent_dir, device=device, amp=cfg.amp, channels_last=cfg.channels_last
        )
        if loss.needs_parent_head and parent.head is None:
            raise BadInputError(
                f"{plan.parent_dir / 'weights.safetensors'}: has no head.* tensors, and method "
                f"{cfg.method} trains against the parent's classifier"
            )
        if (parent.card.in_channels, parent.card.image_size) != (channels, h):
            raise BadInputError(
                f"parent {cfg.parent} was trained on {parent.card.image_size} px images with "
                f"{parent.card.in_channels} channels; these are {h} px with {channels}"
            )
    init: dict[str, Any] = {"kind": "scratch"}
    if parent is not None and loss.init_from_parent and plan.init == "scratch":
        # lwf's own switch: the parent's model only; its classifier lives in the method.
        model.load_state_dict(parent.model.state_dict())
        init = {"kind": "parent-model", "parent": cfg.parent, "by": f"method {cfg.method}"}
    if plan.init == "parent":
        init = _init_from_parent(model, head, classes, plan, (channels, h))
    if plan.init_reason is not None:
        init["by"] = init.get("by") or plan.init_reason

    run_fp = fingerprint(
        {
            "version": version,
            "config": cfg.model_dump(),
            "data": data.data_fingerprint,
            "source": data.source_fingerprint,
            "n": int(n),
            "parent": None if parent_card is None else parent_card.weights_sha256,
            "world": int(os.environ.get("WORLD_SIZE", "1")),
        }
    )
    ckpt = checkpoint_folder(version, checkpoint_dir)
    started = time.perf_counter()
    result = fit(
        model,
        head,
        loss,
        images_t,
        targets,
        cfg,
        classes=classes,
        parent=parent,
        seed=seed,
        checkpoint_dir=ckpt,
        metrics_path=out / METRICS,
        run_fingerprint=run_fp,
        progress=progress,
        quiet=quiet,
        on_epoch_end=on_epoch_end,
        new_items=new,
    )
    wall = time.perf_counter() - started
    # Every field but schema and weights_sha256, which save_version adds with the weights.
    fields: dict[str, Any] = {
        "version": version,
        "backbone": cfg.backbone,
        "pooling": cfg.pooling,
        "neck": cfg.neck,
        "dim": cfg.dim,
        "in_channels": int(channels),
        "image_size": int(h),
        "transform": TRANSFORM_ID,
        "head": cfg.head,
        "head_params": head.params(),
        "num_classes": len(classes),
        "classes": classes,
        **loss.describe(),
        "parent": cfg.parent,
        "parent_weights_sha256": None if parent_card is None else parent_card.weights_sha256,
        "init": init,
        "split": data.split,
        "data_fingerprint": data.data_fingerprint,
        "source_fingerprint": data.source_fingerprint,
        "data": {
            "split": data.split,
            "train_fingerprint": data.data_fingerprint,
            "source_fingerprint": data.source_fingerprint,
        },
        "num_images": int(n),
        "epochs": cfg.epochs,
        "steps": result.steps,
        "seed": cfg.seed,
        "effective_seed": seed,
        "training_seconds": round(result.seconds, 3),
        "wall_seconds": round(wall, 3),
        "device": result.device,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "config": cfg.model_dump(mode="json"),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if int(os.environ.get("RANK", "0")) != 0:
        return None  # a torchrun worker other than rank 0 writes nothing
    from compat.train.progress import write_metrics

    write_metrics(out / METRICS, result.metrics)
    card = save_version(out, result.model, result.head, fields)
    if not keep_checkpoint and ckpt.is_dir():
        shutil.rmtree(ckpt, ignore_errors=True)
    return card


def _init_from_parent(
    model: torch.nn.Module,
    head: Any,
    classes: list[str],
    plan: Plan,
    channels_size: tuple[int, int],
) -> dict[str, Any]:
    """Fine-tuning: the parent's weights (verified against its card) into ``model`` and ``head``."""
    from compat.models.version import load_parts
    from compat.train.init import init_from_parent

    assert plan.parent_dir is not None and plan.parent_card is not None
    parent_model, parent_head, card = load_parts(plan.parent_dir)
    card = card.named(plan.cfg.parent)
    theirs = (card.in_channels, card.image_size)
    if theirs != channels_size:
        raise BadInputError(
            f"train.{plan.version}.init: parent {plan.cfg.parent} was trained on {theirs[1]} px "
            f"images with {theirs[0]} channels; these are {channels_size[1]} px with "
            f"{channels_size[0]}"
        )
    return init_from_parent(model, head, parent_model, parent_head, classes, card)


def train_version(
    version: str,
    cfg: TrainConfig,
    *,
    source: SourceLike,
    manifest: ManifestLike,
    models_dir: str | Path = "models",
    checkpoint_dir: str | Path | None = None,
    progress: bool | None = None,
    quiet: bool = False,
) -> ModelCard | None:
    """Train ``version`` on the manifest's items, loaded from ``source``; see :func:`train_arrays`."""
    plan = plan_run(version, cfg, Path(models_dir))
    checkpoint_folder(version, checkpoint_dir)  # before any image loads
    if manifest.source_fingerprint != source.fingerprint:
        raise BadInputError(
            f"splits/{manifest.name}.json: made from source {manifest.source_fingerprint}, but the "
            f"source is now {source.fingerprint}; re-run the split stage"
        )
    if len(manifest.items) != len(manifest.labels):
        raise BadInputError(f"splits/{manifest.name}.json: items and labels differ in length")
    images = source.load(manifest.items)
    data = DataInfo(
        split=manifest.name,
        data_fingerprint=manifest.fingerprint,
        source_fingerprint=manifest.source_fingerprint,
        classes=list(manifest.classes),
    )
    return train_arrays(
        version,
        cfg,
        images,
        manifest.labels,
        data,
        models_dir=models_dir,
        checkpoint_dir=checkpoint_dir,
        progress=progress,
        quiet=quiet,
        plan=plan,
    )
