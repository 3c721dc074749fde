"""Training params of one version (``params.yaml: train: {v1: ..., v2: ...}``).

Import-light on purpose (pydantic only, no torch): the global params model embeds
:class:`TrainConfig`, and the CLI validates params without paying for torch. Names (backbone,
head, method) and method params are checked against their catalogs by
:meth:`TrainConfig.check_names` (the train stage calls it right after reading params.yaml, so an
unknown name is a params error, exit 4, naming the file and field and listing the known names)
and again when the run is built, before any training starts.

Defaults are the short-schedule CPU settings that docs/findings.md measured to work: small CNN,
AdamW lr 3e-3 weight decay 0.05, cosine with 15% warm-up (one-cycle-like), batch 128, 6 epochs,
CosFace s=16 m=0.2, random +-2 px shift.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from compat.names import Name


class AugmentConfig(BaseModel):
    """Batched augmentation of uint8 images, done on the training device."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    shift: int = Field(
        2, ge=0, le=1024, description="random translation of up to +-shift px per axis"
    )
    pad_mode: Literal["edge", "zero"] = Field(
        "edge", description="what fills the border a shift uncovers (edge: repeat the border)"
    )
    hflip: bool = Field(False, description="random horizontal flip (off: glyphs are not symmetric)")


class TrainConfig(BaseModel):
    """How to train one version. Unknown keys are errors (a typo must not become a default)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # model
    backbone: str = "small-cnn"
    backbone_weights: str | None = Field(
        None, description="local safetensors file that initialises the backbone (no downloads)"
    )
    pooling: Literal["avg", "gem"] = "avg"
    neck: Literal["linear-bn", "bn-linear"] = Field(
        "linear-bn",
        description="embedding layer: linear-bn (linear then BatchNorm, the BNNeck) or bn-linear "
        "(BatchNorm then a bias-free linear map, the d-Simplex paper's fc1; see "
        "compat.models.embedding)",
    )
    # Bounded before anything is allocated: a dim of 10**12 would ask torch for petabytes.
    dim: int = Field(128, ge=1, le=65536)
    head: str = "cosface"
    s: float = Field(16.0, gt=0, description="scale of the normalised heads")
    m: float = Field(0.2, ge=0, description="margin (cosface, arcface, dsimplex margin form)")
    easy_margin: bool = Field(False, description="arcface: margin only where cos > 0")
    dsimplex_form: Literal["linear", "margin"] = Field(
        "linear",
        description="dsimplex: linear (the paper: logits W z, z unnormalised, plain CE) or margin "
        "(a fixed-weight CosFace with s and m)",
    )

    # compatibility
    method: str = "independent"
    method_params: dict[str, Any] = Field(
        default_factory=dict, description="validated by the method's own params model"
    )
    parent: Name | None = None
    init: Literal["auto", "scratch", "parent"] = Field(
        "auto",
        description="parent: fine-tune, starting from the parent's weights (backbone and "
        "embedding layer; a learnable head's rows matched by class name, new classes get fresh "
        "rows); needs the parent's backbone, pooling, neck, dim and head. auto: parent for the "
        "methods that fine-tune by default (bct, bct-kd: measured in docs/findings.md, "
        "'BCT on a strong old model') when the parent's architecture matches, else scratch",
    )
    bn_stats: Literal["update", "frozen"] = Field(
        "update",
        description="BatchNorm running statistics while training: update (PyTorch's train mode) "
        "or frozen (every BatchNorm layer normalises with the starting model's statistics and "
        "never updates them; its affine weights still train). frozen is for fine-tuning "
        "(init: parent): a task's few classes would otherwise replace the statistics the "
        "gallery was embedded with (docs/findings.md, 'Fine-tuning: where the drift is')",
    )

    # data
    split: Name | None = Field(
        None, description="train manifest splits/<split>.json; default: the version's name"
    )
    augment: AugmentConfig = Field(default_factory=AugmentConfig)
    sampler: Literal["random", "balanced"] = Field(
        "random",
        description="random: each epoch a random permutation cut into batches. balanced: every "
        "batch half replay, half new classes, each half drawn afresh (the IAM-CL2R reference "
        "code's BalancedBatchSampler; compat.train.sampler), as many batches per epoch",
    )
    new_classes: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="balanced: the last new_classes classes of the training set's class list "
        "are the task's new classes, the others its replay; default: the classes the parent "
        "version was not trained on",
    )

    # optimisation
    epochs: int = Field(6, ge=1, le=100_000)
    batch_size: int = Field(128, ge=2, le=1_000_000)
    optimizer: Literal["adamw", "sgd"] = "adamw"
    lr: float = Field(3e-3, gt=0, le=1000, description="peak learning rate (over 1000: a typo)")
    weight_decay: float = Field(0.05, ge=0)
    momentum: float = Field(0.9, ge=0, lt=1, description="sgd only")
    schedule: Literal["cosine", "step"] = "cosine"
    warmup: float = Field(0.15, ge=0, lt=1, description="fraction of all steps, linear from 0")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="cosine floor as a fraction of lr")
    step_milestones: list[float] = Field(
        default_factory=lambda: [0.5, 0.75], description="step schedule: fractions of all steps"
    )
    step_gamma: float = Field(0.1, gt=0)
    grad_clip: float | None = Field(None, gt=0)
    drop_last: bool = True

    # reproducibility and hardware
    seed: int = Field(0, ge=0, le=2**32 - 1, description="random seed (0 .. 2**32 - 1)")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = Field(
        True,
        description="bf16 autocast of the model's forward (and the frozen parent's) on CUDA and "
        "on CPUs with native bf16 (AVX512-BF16/AMX: about 2x faster there, docs/findings.md); "
        "weights, heads and losses stay float32; elsewhere the CPU trains in float32",
    )
    channels_last: bool = Field(True, description="channels-last memory format (faster convs)")
    deterministic: bool = Field(True, description="deterministic algorithms on the CPU")
    threads: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="CPU threads of this training (default: COMPAT_THREADS, else the cores "
        "this process may use: its CPU affinity capped by its cgroup's CPU quota; "
        "compat.cpu)",
    )
    embed_batch_size: int = Field(512, ge=1, le=1_000_000)
    checkpoint: bool = Field(True, description="checkpoint every epoch and resume from it")

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if sorted(self.step_milestones) != list(self.step_milestones) or any(
            not 0 < f < 1 for f in self.step_milestones
        ):
            raise ValueError("step_milestones must be increasing fractions in (0, 1)")
        if self.new_classes is not None and self.sampler != "balanced":
            raise ValueError("new_classes is read by sampler: balanced only; set both or neither")
        return self

    def check_names(self, path: str | os.PathLike[str], prefix: str) -> None:
        """Check backbone, head and method against their catalogs and method_params against the
        method's params model (imports torch); BadInputError naming ``path`` and the field
        (``params.yaml: train.v2.method: unknown method 'bctt'; known: bct, ...``)."""
        from compat.config import validate_with
        from compat.losses import LOSSES
        from compat.models.backbones import BACKBONES
        from compat.models.heads import HEADS

        BACKBONES.get(self.backbone, where=f"{path}: {prefix}.backbone")
        HEADS.get(self.head, where=f"{path}: {prefix}.head")
        method = LOSSES.get(self.method, where=f"{path}: {prefix}.method")
        validate_with(method.Params, self.method_params, path, prefix=f"{prefix}.method_params")

    def head_params(self) -> dict[str, Any]:
        """Keyword arguments of the head (each head keeps those it takes)."""
        params: dict[str, Any] = {"s": self.s, "m": self.m}
        if self.head == "arcface":
            params["easy_margin"] = self.easy_margin
        if self.head == "dsimplex":
            params["form"] = self.dsimplex_form
        return params


__all__ = ["AugmentConfig", "TrainConfig"]
