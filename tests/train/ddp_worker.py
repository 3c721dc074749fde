"""Run under torchrun by test_distributed.py (and in-process for the single-process reference).

1. The real entry point, ``stages/train.py v1`` (BatchNorm model), into ``<models>/``.
2. ``fit`` on a model without BatchNorm, whose weights go to ``<models>/nobn.safetensors``: with no
   batch statistics, N processes must reproduce one process up to float rounding.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn
from train_synthetic import make_images

REPO = Path(__file__).resolve().parents[2]


class NoBN(nn.Module):
    dim = 8

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(8, self.dim),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def fit_without_bn() -> dict[str, torch.Tensor]:
    from compat.losses import create_loss
    from compat.models import create_head
    from compat.train import TrainConfig
    from compat.train.fit import fit

    images, labels = make_images(num_classes=4, per_class=16, size=8)
    classes = sorted(set(labels))
    targets = torch.tensor([classes.index(c) for c in labels])
    torch.manual_seed(0)
    model, head = NoBN(), create_head("cosface", 8, 4)
    # float32 (amp off): the check is DDP's arithmetic, and bf16 autocast, which the CPU uses where
    # it has native bf16, rounds each rank's half-batch activations apart from the whole batch's
    cfg = TrainConfig(
        batch_size=16, epochs=2, optimizer="sgd", lr=0.1, seed=1, checkpoint=False, amp=False
    )
    fit(model, head, create_loss("independent"), images, targets, cfg, classes=classes, quiet=True)
    return {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()} | {
        f"head.{k}": v.contiguous() for k, v in head.state_dict().items()
    }


def main(models: str) -> int:
    spec = importlib.util.spec_from_file_location("train_stage", REPO / "stages" / "train.py")
    stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage)
    rc = stage.main(["v1", "--models", models, "--no-progress"])
    if rc:
        return rc
    weights = fit_without_bn()
    if int(os.environ.get("RANK", "0")) == 0:
        save_file(weights, str(Path(models) / "nobn.safetensors"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
