"""The parent version as a frozen teacher: eval mode, no gradients, inference-mode forwards.

Compatibility losses read the parent through this wrapper only, so the cost rules hold in one
place: the parent never trains, its forward runs under ``torch.inference_mode()`` (bf16 autocast on
a GPU), and embeddings of un-augmented training images are computed once per run and cached.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from compat.cpu import cpu_has_fast_bf16
from compat.models.card import ModelCard
from compat.models.heads import Head


def autocast_for(
    device: torch.device, amp: bool, cpu_bf16: bool = False
) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on CUDA when ``amp``; on the CPU only when asked (``cpu_bf16``)."""
    if amp and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    if amp and cpu_bf16 and device.type == "cpu":
        return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def to_model_input(
    batch_u8: torch.Tensor, device: torch.device, channels_last: bool = False
) -> torch.Tensor:
    """uint8 (n, H, W, C) on any device -> float (n, C, H, W) in [-1, 1] on ``device``.

    Same arithmetic as :func:`compat.data.transforms.to_tensor` (x / 127.5 - 1), done after the
    transfer so only bytes cross the bus.
    """
    x = batch_u8.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
    if channels_last:
        return x.contiguous(memory_format=torch.channels_last)
    return x.contiguous()


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Temporarily put a model in eval mode (BatchNorm uses, never updates, its stats); afterwards
    every submodule gets its own mode back, so layers kept in eval mode while the rest trains
    (TrainConfig ``bn_stats: frozen``) stay in eval mode."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.training = training


def embed_images(
    model: nn.Module,
    images: torch.Tensor,
    *,
    batch_size: int = 512,
    device: torch.device | str = "cpu",
    normalize: bool = True,
    amp: bool = True,
    channels_last: bool = False,
    cpu_bf16: bool = False,
) -> torch.Tensor:
    """Embed uint8 (n, H, W, C) ``images`` in eval mode; returns float32 (n, dim) on ``device``.

    The training loop's embedder (tensors stay on the device, bf16 autocast, channels-last).
    :func:`compat.embeddings.embed.embed_images` is the one evaluation, psi fitting and the
    cache use; the two are kept apart because their numbers differ: this one makes the input
    contiguous NCHW after the transfer, that one feeds the permuted (NHWC-strided) tensor, and
    convolutions pick other kernels for the two layouts (a small-cnn's rows differ in the last
    bits). Merging them would change either the trained weights or every cached embedding.
    """
    device = torch.device(device)
    out = []
    with eval_mode(model), torch.inference_mode(), autocast_for(device, amp, cpu_bf16):
        for start in range(0, len(images), batch_size):
            x = to_model_input(images[start : start + batch_size], device, channels_last)
            e = model(x).float()
            out.append(F.normalize(e, dim=1) if normalize else e)
    if not out:
        return torch.empty(0, getattr(model, "dim", 0), device=device)
    # Clone outside inference mode: inference tensors cannot be saved for backward.
    return torch.cat(out).clone()


class FrozenParent:
    """A loaded parent version (model, optional classifier head, card), frozen on ``device``.

    With ``amp`` its forward runs in bf16: on CUDA, and on CPUs with native bf16
    (:func:`cpu_has_fast_bf16`; ``cpu_bf16=None`` decides by that), where it halves the cost of a
    teacher forward. The parent only provides targets, whose bf16 rounding (~0.4%) is far below
    what the losses resolve; the trained model itself stays float32 on the CPU.
    """

    def __init__(
        self,
        model: nn.Module,
        head: Head | None,
        card: ModelCard,
        device: torch.device | str = "cpu",
        amp: bool = True,
        channels_last: bool = False,
        cpu_bf16: bool | None = False,
    ) -> None:
        self.device = torch.device(device)
        self.amp = amp
        self.cpu_bf16 = cpu_has_fast_bf16() if cpu_bf16 is None else cpu_bf16
        self.channels_last = channels_last
        self.card = card
        self.model = model.to(self.device).eval().requires_grad_(False)
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.head = None if head is None else head.to(self.device).eval().requires_grad_(False)
        self._cache: dict[str, torch.Tensor] = {}
        self.forward_calls = 0  # counted so tests can prove a method never ran the backbone

    @classmethod
    def load(
        cls,
        path: str | Path,
        device: torch.device | str = "cpu",
        amp: bool = True,
        channels_last: bool = True,
        cpu_bf16: bool | None = None,
    ) -> FrozenParent:
        from compat.models.version import load_parts

        model, head, card = load_parts(path)
        return cls(model, head, card, torch.device(device), amp, channels_last, cpu_bf16)

    @property
    def dim(self) -> int:
        return self.card.dim

    @property
    def classes(self) -> list[str]:
        return self.card.class_names

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Raw parent embeddings of a float model-input batch (float32, no autograd history)."""
        self.forward_calls += 1
        with torch.inference_mode(), autocast_for(self.device, self.amp, self.cpu_bf16):
            e = self.model(x).float()
        return e.clone()

    def features(self, images: torch.Tensor, key: str, batch_size: int = 512) -> torch.Tensor:
        """L2-normalised parent embeddings of un-augmented ``images``, computed once per ``key``."""
        if key not in self._cache:
            self.forward_calls += 1
            self._cache[key] = embed_images(
                self.model,
                images,
                batch_size=batch_size,
                device=self.device,
                amp=self.amp,
                channels_last=self.channels_last,
                cpu_bf16=self.cpu_bf16,
            )
        return self._cache[key]
