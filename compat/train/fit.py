"""The fit loop: arrays in, trained model out. No file formats here (see :mod:`compat.train.run`).

Training images live in memory as one uint8 (N, H, W, C) tensor; each step gathers a batch,
moves the bytes to the device, shifts them there in one vectorised gather, converts to float and
runs model -> head -> method. The parent (if the method needs its forward) runs frozen under
``torch.inference_mode()``. The model runs under bf16 autocast on CUDA and on CPUs with native
bf16 (AVX512-BF16 or AMX, :func:`compat.cpu.cpu_has_fast_bf16`; ``amp: false`` turns it
off): there oneDNN's bf16 convolutions train the small CNN about twice as fast as float32
(docs/findings.md, "Training on the CPU"). Heads, losses, weights and optimizer state stay float32. Channels-last layout is used on both devices (oneDNN's convolutions are ~17% faster
in it on the CPU as well). On the CPU the run is seeded and deterministic, and a run resumed from
its last per-epoch checkpoint ends with bit-identical weights.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from compat.cpu import apply_threads, cpu_has_fast_bf16
from compat.errors import BadInputError
from compat.io import fingerprint as fingerprint_of
from compat.losses.base import CompatLoss, MethodContext, Step
from compat.models.heads import Head
from compat.models.parent import FrozenParent, autocast_for
from compat.train import augment as aug
from compat.train.checkpoint import (
    flatten_optimizer,
    load_checkpoint,
    restore_rng,
    rng_tensors,
    save_checkpoint,
    unflatten_optimizer,
)
from compat.train.config import TrainConfig
from compat.train.device import determinism, resolve_device
from compat.train.distributed import DistInfo, all_reduce_sum, barrier, init_distributed, shutdown
from compat.train.progress import Reporter, log_mlflow, write_metrics
from compat.train.sampler import BalancedBatches
from compat.train.schedule import lr_factor

# Whole training sets up to this size are copied to the GPU once and gathered there.
_DEVICE_DATA_BYTES = 4 << 30


class Trainee(nn.Module):
    """Everything that trains (model, head, method's own parameters) as one module for DDP."""

    def __init__(
        self, model: nn.Module, head: Head, loss: CompatLoss, amp: bool, frozen_bn: bool = False
    ) -> None:
        super().__init__()
        self.model = model
        self.head = head
        self.loss = loss
        self.amp = amp
        # bn_stats: frozen: these layers stay in eval mode whenever the trainee trains, so they
        # normalise with the starting model's running statistics and never update them.
        self._frozen_norms = (
            [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
            if frozen_bn
            else []
        )

    def train(self, mode: bool = True) -> Trainee:
        super().train(mode)
        for norm in self._frozen_norms:
            norm.eval()
        return self

    def forward(
        self,
        x: torch.Tensor,
        targets: torch.Tensor,
        old: torch.Tensor | None,
        index: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        with autocast_for(x.device, self.amp, cpu_has_fast_bf16()):
            new = self.model(x)
        new = new.float()  # heads and losses in float32
        head_loss = self.head.loss(new, targets)
        return self.loss(Step(new=new, targets=targets, head_loss=head_loss, old=old, index=index))


@dataclass
class FitResult:
    model: nn.Module
    head: Head
    loss: CompatLoss
    metrics: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0  # training time, summed over resumed runs
    steps: int = 0
    resumed_from_epoch: int | None = None
    device: str = "cpu"


def build_optimizer(
    params: list[tuple[str, nn.Parameter]], cfg: TrainConfig
) -> torch.optim.Optimizer:
    """Weight decay on weight matrices and kernels only; biases, norms and GeM's p are exempt."""
    decay = [p for _, p in params if p.ndim >= 2]
    no_decay = [p for _, p in params if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)


def _as_uint8_tensor(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(images)
    if t.dtype != torch.uint8 or t.ndim != 4:
        raise BadInputError(
            f"training images must be uint8 (n, H, W, C), got {t.dtype} {tuple(t.shape)}"
        )
    return t


def fit(
    model: nn.Module,
    head: Head,
    loss: CompatLoss,
    images: np.ndarray | torch.Tensor,
    targets: np.ndarray | torch.Tensor,
    cfg: TrainConfig,
    *,
    classes: list[str] | None = None,
    parent: FrozenParent | None = None,
    seed: int | None = None,
    checkpoint_dir: str | Path | None = None,
    metrics_path: str | Path | None = None,
    run_fingerprint: str | None = None,
    progress: bool | None = None,
    quiet: bool = False,
    on_epoch_end: Callable[[int, dict[str, Any]], None] | None = None,
    new_items: torch.Tensor | None = None,
) -> FitResult:
    """Train ``model`` + ``head`` with ``loss`` on uint8 (N, H, W, C) ``images`` and ``targets``.

    ``seed`` (default ``cfg.seed``) drives shuffling and augmentation; seed the model's
    initialisation before building it. With ``checkpoint_dir`` a checkpoint is written after every
    epoch and a matching one (same ``run_fingerprint``) is resumed from. ``on_epoch_end(epoch,
    row)`` runs after each epoch's checkpoint (1-based epoch). Under torchrun, only rank 0 writes.
    ``progress``: the rich bar on (True), off (False), or on when stderr is a terminal (None).
    ``new_items``: (N,) bool, which images belong to the task's new classes; ``cfg.sampler:
    balanced`` needs it (:func:`compat.train.sampler.new_items`).
    """
    images_t = _as_uint8_tensor(images)
    targets_t = torch.as_tensor(targets, dtype=torch.long)
    if len(targets_t) != len(images_t):
        raise BadInputError(f"{len(images_t)} images but {len(targets_t)} targets")
    if len(images_t) < 2:
        raise BadInputError(f"a training set of {len(images_t)} image(s) is too small to train on")
    if len(images_t) < cfg.batch_size:
        # A small own-image set with the default batch size: train on whole-set batches (with
        # drop_last a larger batch would give no step at all), and say so on stderr.
        print(
            f"train: batch_size {cfg.batch_size} is larger than the training set "
            f"({len(images_t)} images): using batches of {len(images_t)}",
            file=sys.stderr,
        )
        cfg = cfg.model_copy(update={"batch_size": len(images_t)})
    balanced = None
    if cfg.sampler == "balanced":
        if new_items is None or new_items.shape != (len(images_t),):
            raise BadInputError(
                "sampler: balanced needs new_items, one bool per training image (which are new)"
            )
        balanced = BalancedBatches(new_items.to(torch.bool), cfg.batch_size)
    info = init_distributed(use_cuda=resolve_device(cfg.device).type == "cuda")
    try:
        run = _Run(
            model, head, loss, images_t, targets_t, cfg,
            classes=classes if classes is not None else [str(i) for i in range(head.num_classes)],
            parent=parent,
            seed=cfg.seed if seed is None else seed,
            info=info,
            ckpt_dir=Path(checkpoint_dir) if checkpoint_dir is not None and cfg.checkpoint else None,
            run_fingerprint=run_fingerprint,
            balanced=balanced,
        )  # fmt: skip
        with determinism(cfg.deterministic, run.device):
            run.prepare()
            show = progress if info.is_main else False
            with Reporter(cfg.epochs, show, quiet or not info.is_main) as reporter:
                for epoch in range(run.start_epoch, cfg.epochs):
                    row = run.train_epoch(epoch, reporter)
                    if info.is_main:
                        if metrics_path is not None:
                            write_metrics(metrics_path, run.metrics)
                        log_mlflow(row)
                        run.save_checkpoint(epoch + 1)
                    barrier(info)
                    if on_epoch_end is not None:
                        on_epoch_end(epoch + 1, row)
        return FitResult(
            model=model.eval(),
            head=head.eval(),
            loss=loss,
            metrics=run.metrics,
            seconds=run.elapsed,
            steps=run.step,
            resumed_from_epoch=run.resumed_from,
            device=str(run.device),
        )
    finally:
        shutdown(info)


class _Run:
    """The state of one training run; :func:`fit` drives it epoch by epoch."""

    def __init__(
        self,
        model: nn.Module,
        head: Head,
        loss: CompatLoss,
        images: torch.Tensor,
        targets: torch.Tensor,
        cfg: TrainConfig,
        *,
        classes: list[str],
        parent: FrozenParent | None,
        seed: int,
        info: DistInfo,
        ckpt_dir: Path | None,
        run_fingerprint: str | None,
        balanced: BalancedBatches | None = None,
    ) -> None:
        self.model, self.head, self.loss, self.cfg = model, head, loss, cfg
        self.balanced = balanced
        self.parent, self.info, self.ckpt_dir = parent, info, ckpt_dir
        self.device = resolve_device(cfg.device)
        apply_threads(cfg.threads)  # COMPAT_THREADS or the cores this process may use
        if cfg.batch_size % info.world_size:
            raise BadInputError(
                f"batch_size {cfg.batch_size} is not divisible by the {info.world_size} processes"
            )
        self.n = len(images)
        self.steps_per_epoch = (
            self.n // cfg.batch_size if cfg.drop_last else math.ceil(self.n / cfg.batch_size)
        )
        self.total_steps = self.steps_per_epoch * cfg.epochs
        self.fingerprint = run_fingerprint or fingerprint_of(
            {"config": cfg.model_dump(), "n": self.n, "classes": classes, "seed": seed}
        )
        torch.manual_seed(seed)
        self.gen = torch.Generator().manual_seed(seed)  # shuffling + augmentation, checkpointed
        self.images, self.targets = images, targets
        self.ctx = MethodContext(
            classes=classes,
            images=images,
            targets=targets,
            dim=int(getattr(model, "dim", 0)),
            head=head,
            parent=parent,
            device=self.device,
            epochs=cfg.epochs,
            embed_batch_size=cfg.embed_batch_size,
            model=model,
        )
        self.start_epoch, self.step, self.elapsed = 0, 0, 0.0
        self.metrics: list[dict[str, Any]] = []
        self.resumed_from: int | None = None

    def prepare(self) -> None:
        """Move everything to the device, let the method build its buffers, resume if possible."""
        cuda = self.device.type == "cuda"
        self.model.to(self.device)
        if self.cfg.channels_last:
            self.model.to(memory_format=torch.channels_last)
        self.head.to(self.device)
        fits = cuda and self.images.nbytes <= _DEVICE_DATA_BYTES
        self.data = self.images.to(self.device) if fits else self.images
        if cuda and not fits:
            self.data = self.data.pin_memory()
        self.targets_dev = self.targets.to(self.device)
        self.loss.prepare(self.ctx)
        self.loss.to(self.device)
        self.trainee = Trainee(
            self.model,
            self.head,
            self.loss,
            amp=self.cfg.amp,
            frozen_bn=self.cfg.bn_stats == "frozen",
        ).train()
        self.named = [(k, p) for k, p in self.trainee.named_parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.named, self.cfg)
        self._resume()
        self.runner: nn.Module = self.trainee
        if self.info.enabled:
            self.runner = nn.parallel.DistributedDataParallel(
                self.trainee, device_ids=[self.device.index] if cuda else None
            )
        self.use_parent = self.parent is not None and self.loss.needs_parent_forward

    def _resume(self) -> None:
        ckpt = load_checkpoint(self.ckpt_dir) if self.ckpt_dir is not None else None
        if ckpt is None:
            return
        tensors, meta = ckpt
        if meta.get("fingerprint") != self.fingerprint:
            if self.info.is_main:
                print(f"note: ignoring checkpoint in {self.ckpt_dir}: it is from another run")
            return
        _load_state(self.trainee, self.optimizer, self.gen, tensors, meta)
        self.start_epoch, self.step = int(meta["epoch"]), int(meta["step"])
        self.metrics, self.elapsed = list(meta["metrics"]), float(meta["seconds"])
        self.resumed_from = self.start_epoch

    def train_epoch(self, epoch: int, reporter: Reporter) -> dict[str, Any]:
        cfg, info = self.cfg, self.info
        self.loss.on_epoch_start(epoch, self.ctx)
        t0, cpu0 = time.perf_counter(), time.process_time()
        perm = torch.randperm(self.n, generator=self.gen) if self.balanced is None else None
        sums: dict[str, torch.Tensor] = {}
        reporter.start_epoch(epoch, self.steps_per_epoch)
        last_report, lr = t0, cfg.lr
        for i in range(self.steps_per_epoch):
            # Every rank draws the whole global batch (same generator), then takes its shard.
            if perm is not None:
                global_idx = perm[i * cfg.batch_size : (i + 1) * cfg.batch_size]
            else:
                global_idx = self.balanced.batch(self.gen)  # type: ignore[union-attr]
            draw = aug.draw(len(global_idx), cfg.augment, self.gen)
            shard = slice(info.rank, None, info.world_size)
            idx = global_idx[shard]
            x = _batch(self.data, idx, aug.AugmentDraw(draw.shifts[shard], draw.flips[shard]),
                       cfg, self.device, cfg.channels_last)  # fmt: skip
            y = self.targets_dev[idx.to(self.device)]
            lr = cfg.lr * lr_factor(self.step, self.total_steps, cfg)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            old = self.parent.embed(x) if self.use_parent else None  # type: ignore[union-attr]
            parts = self.runner(x, y, old, idx)
            total = torch.stack(list(parts.values())).sum()
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
            if cfg.grad_clip is not None:
                nn.utils.clip_grad_norm_([p for _, p in self.named], cfg.grad_clip)
            self.optimizer.step()
            self.step += 1
            for k, v in (("loss", total), *parts.items()):
                sums[k] = sums.get(k, 0.0) + v.detach().float()  # no host sync per step
            now = time.perf_counter()
            if reporter.enabled and (now - last_report > 0.25 or i + 1 == self.steps_per_epoch):
                last_report = now
                running = {k: float(v) / (i + 1) for k, v in sums.items()}
                reporter.update(i + 1, running, (i + 1) * cfg.batch_size / max(now - t0, 1e-9))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        # Checked once an epoch (a per-step check would sync the device every step): a NaN or
        # inf term has already reached the weights, so the run stops before they are saved.
        bad = [k for k, v in sums.items() if not bool(torch.isfinite(v).all())]
        if bad:
            term = next((k for k in bad if k != "loss"), "loss")
            raise BadInputError(
                f"train: epoch {epoch}: loss term {term!r} is not finite (NaN or inf); nothing "
                "of this epoch is saved: check the method's params and the learning rate"
            )
        seconds = time.perf_counter() - t0
        self.elapsed += seconds
        row = _epoch_row(epoch, sums, self.steps_per_epoch, lr, seconds, cfg.batch_size, info)
        row["cpu_seconds"] = time.process_time() - cpu0  # robust to other load on a shared host
        self.metrics.append(row)
        reporter.end_epoch(row)
        return row

    def save_checkpoint(self, epochs_done: int) -> None:
        if self.ckpt_dir is None:
            return
        tensors = {f"trainee.{k}": v for k, v in self.trainee.state_dict().items()}
        opt_tensors, opt_meta = flatten_optimizer(self.optimizer.state_dict())
        tensors.update(opt_tensors)
        tensors.update(rng_tensors(self.gen))
        meta = {
            "epoch": epochs_done,
            "step": self.step,
            "metrics": self.metrics,
            "seconds": self.elapsed,
            "fingerprint": self.fingerprint,
            "optimizer": opt_meta,
        }
        save_checkpoint(self.ckpt_dir, tensors, meta)


def _batch(
    data: torch.Tensor,
    idx: torch.Tensor,
    draw: aug.AugmentDraw,
    cfg: TrainConfig,
    device: torch.device,
    channels_last: bool,
) -> torch.Tensor:
    """Gather, augment (on the device) and convert one batch to float (n, C, H, W) in [-1, 1]."""
    u8 = data[idx.to(data.device)].to(device, non_blocking=True)
    u8 = aug.augment(u8, draw, cfg.augment)
    x = u8.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
    return x.contiguous(
        memory_format=torch.channels_last if channels_last else torch.contiguous_format
    )


def _epoch_row(
    epoch: int,
    sums: dict[str, torch.Tensor],
    steps: int,
    lr: float,
    seconds: float,
    batch: int,
    info: DistInfo,
) -> dict[str, Any]:
    names = list(sums)
    vec = torch.stack([torch.as_tensor(sums[k]).float().cpu() for k in names])
    vec = all_reduce_sum(vec, info) / (steps * info.world_size)
    row: dict[str, Any] = {"epoch": epoch + 1}
    for k, v in zip(names, vec.tolist(), strict=True):
        row["loss" if k == "loss" else f"loss_{k}"] = float(v)
    row.update(lr=float(lr), seconds=float(seconds), images_per_s=float(steps * batch / seconds))
    return row


def _load_state(
    trainee: Trainee,
    optimizer: torch.optim.Optimizer,
    gen: torch.Generator,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, Any],
) -> None:
    state = {k[len("trainee.") :]: v for k, v in tensors.items() if k.startswith("trainee.")}
    try:
        trainee.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise BadInputError(
            f"checkpoint does not fit this run: {str(err).splitlines()[0]}"
        ) from None
    optimizer.load_state_dict(unflatten_optimizer(tensors, meta["optimizer"]))
    restore_rng(tensors, gen)
