"""Backbone catalog: a convolutional trunk that maps (n, C, H, W) images to (n, features) vectors.

Every backbone ends in a pooling layer (``avg`` or ``gem``) and exposes ``out_features``; the
embedding layer on top lives in :mod:`compat.models.embedding`. Nothing here downloads weights:
torchvision models are built with ``weights=None`` and a local safetensors file may initialise any
backbone (:func:`load_backbone_weights`).

- ``tiny``: two conv layers, for tests.
- ``small-cnn``: 7 x (conv3x3-BN-ReLU), widths 16 -> 128, three max-pools; the CPU default
  (docs/findings.md: ~1,700 train images/s at 32 px on 2 threads).
- ``resnet18``, ``resnet50``: torchvision, with a 3x3 stride-1 stem and no max-pool when the input
  is below 64 px (the CIFAR adaptation), so a 32 px image is not reduced to 1x1 before layer4.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from compat.catalog import Catalog
from compat.errors import BadInputError, NotFoundError

BACKBONES: Catalog[nn.Module] = Catalog("backbone")

POOLINGS = ("avg", "gem")


class GeM(nn.Module):
    """Generalised-mean pooling (Radenovic et al., TPAMI 2018): (mean x^p)^(1/p), p learnable.

    p = 1 is average pooling and p -> inf max pooling; retrieval models usually learn p near 3.
    """

    def __init__(self, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.tensor(float(p)))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.p.clamp(min=1.0)
        # pow of a bf16 tensor loses too much precision; pool in float32.
        pooled = x.float().clamp(min=self.eps).pow(p).mean(dim=(2, 3))
        return pooled.pow(1.0 / p).to(x.dtype)


class AvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


def make_pool(pooling: str) -> nn.Module:
    if pooling == "avg":
        return AvgPool()
    if pooling == "gem":
        return GeM()
    raise BadInputError(f"pooling: unknown {pooling!r}; known: {', '.join(POOLINGS)}")


def _conv_bn_relu(c_in: int, c_out: int) -> list[nn.Module]:
    return [
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    ]


class ConvNet(nn.Module):
    """A VGG-style stack: ``widths`` conv3x3-BN-ReLU layers, max-pool after the listed indices."""

    def __init__(
        self, in_channels: int, widths: list[int], pool_after: set[int], pooling: str
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for i, w in enumerate(widths):
            layers += _conv_bn_relu(c, w)
            if i in pool_after:
                layers.append(nn.MaxPool2d(2))
            c = w
        self.features = nn.Sequential(*layers)
        self.pool = make_pool(pooling)
        self.out_features = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.features(x))


@BACKBONES.register("tiny")
def tiny(in_channels: int = 3, image_size: int = 16, pooling: str = "avg") -> nn.Module:
    """Two conv layers (8 and 16 channels): a test fixture that trains in milliseconds."""
    return ConvNet(in_channels, [8, 16], {0}, pooling)


@BACKBONES.register("small-cnn")
def small_cnn(
    in_channels: int = 3, image_size: int = 32, pooling: str = "avg", width: int = 1
) -> nn.Module:
    """7 conv3x3-BN-ReLU layers, widths 16 -> 128, max-pools after layers 2, 4 and 6 (docs/findings.md)."""
    widths = [16, 32, 64, 64, 128, 128, 128]
    return ConvNet(in_channels, [w * width for w in widths], {1, 3, 5}, pooling)


class ResNetTrunk(nn.Module):
    """A torchvision ResNet without its classifier, pooled by ``avg`` or ``gem``."""

    def __init__(self, net: nn.Module, pooling: str) -> None:
        super().__init__()
        self.stem = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)
        self.layers = nn.Sequential(net.layer1, net.layer2, net.layer3, net.layer4)
        self.pool = make_pool(pooling)
        self.out_features = net.fc.in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.layers(self.stem(x)))


def _resnet(arch: str, in_channels: int, image_size: int, pooling: str) -> nn.Module:
    import torchvision

    net = getattr(torchvision.models, arch)(weights=None)
    if image_size < 64:
        # CIFAR-style stem: a 7x7/2 conv plus max-pool would leave 1x1 maps at 32 px.
        net.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    elif in_channels != 3:
        net.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
    return ResNetTrunk(net, pooling)


@BACKBONES.register("resnet18")
def resnet18(in_channels: int = 3, image_size: int = 224, pooling: str = "avg") -> nn.Module:
    """torchvision resnet18, random init; 3x3 stride-1 stem and no max-pool below 64 px."""
    return _resnet("resnet18", in_channels, image_size, pooling)


@BACKBONES.register("resnet50")
def resnet50(in_channels: int = 3, image_size: int = 224, pooling: str = "avg") -> nn.Module:
    """torchvision resnet50, random init; 3x3 stride-1 stem and no max-pool below 64 px."""
    return _resnet("resnet50", in_channels, image_size, pooling)


def load_backbone_weights(backbone: nn.Module, path: str | Path, prefix: str = "") -> None:
    """Initialise ``backbone`` from a local safetensors file (never a pickle, never a download).

    ``prefix`` selects keys that start with it (e.g. ``"model.backbone."`` to take the backbone
    out of a compat ``weights.safetensors``); the prefix is stripped before loading. Every
    backbone tensor must be present with the right shape.
    """
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise NotFoundError(f"{path}: backbone weights file not found")
    try:
        tensors = load_file(str(path))
    except Exception as err:  # safetensors raises its own error types for a bad header
        raise BadInputError(f"{path}: not a safetensors file: {err}") from None
    if prefix:
        tensors = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
    expected = backbone.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise BadInputError(
            f"{path}: backbone weights do not match: {len(missing)} missing "
            f"(e.g. {missing[:3]}), {len(unexpected)} unexpected (e.g. {unexpected[:3]})"
        )
    for key, tensor in tensors.items():
        if tensor.shape != expected[key].shape:
            raise BadInputError(
                f"{path}: {key}: shape {tuple(tensor.shape)} != expected {tuple(expected[key].shape)}"
            )
    backbone.load_state_dict(tensors, strict=True)


def create_backbone(
    name: str,
    in_channels: int = 3,
    image_size: int = 32,
    pooling: str = "avg",
    weights: str | Path | None = None,
    **kwargs: object,
) -> nn.Module:
    """Build a backbone by name; an unknown name raises UsageError listing the known ones."""
    if pooling not in POOLINGS:
        raise BadInputError(f"pooling: unknown {pooling!r}; known: {', '.join(POOLINGS)}")
    backbone = BACKBONES.create(
        name, in_channels=in_channels, image_size=image_size, pooling=pooling, **kwargs
    )
    if weights is not None:
        load_backbone_weights(backbone, weights)
    return backbone


__all__ = ["BACKBONES", "GeM", "create_backbone", "load_backbone_weights", "make_pool"]
