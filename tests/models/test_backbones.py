"""Backbone catalog: shapes, small-input resnet stems, pooling, local weights."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from compat.errors import BadInputError, NotFoundError, UsageError
from compat.models.backbones import BACKBONES, GeM, create_backbone
from compat.models.embedding import EmbeddingModel, build_embedding_model


def test_catalog_lists_known_names_on_typo():
    assert BACKBONES.names() == ["resnet18", "resnet50", "small-cnn", "tiny"]
    with pytest.raises(UsageError, match="known: resnet18, resnet50, small-cnn, tiny"):
        create_backbone("resnet19")


@pytest.mark.parametrize(
    ("name", "channels", "size", "features"),
    [
        ("tiny", 1, 16, 16),
        ("small-cnn", 1, 32, 128),
        ("small-cnn", 3, 16, 128),
        ("resnet18", 3, 16, 512),
    ],
)
def test_backbone_shapes(name, channels, size, features):
    net = create_backbone(name, in_channels=channels, image_size=size).eval()
    assert net.out_features == features
    with torch.no_grad():
        out = net(torch.zeros(2, channels, size, size))
    assert out.shape == (2, features)


def test_small_cnn_matches_findings_layout():
    net = create_backbone("small-cnn", in_channels=1)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [16, 32, 64, 64, 128, 128, 128]
    assert all(c.kernel_size == (3, 3) for c in convs)
    assert sum(isinstance(m, nn.MaxPool2d) for m in net.modules()) == 3
    assert sum(isinstance(m, nn.BatchNorm2d) for m in net.modules()) == 7


def test_resnet_stem_adapts_to_small_inputs():
    small = create_backbone("resnet18", in_channels=1, image_size=32)
    conv1 = small.stem[0]
    assert conv1.kernel_size == (3, 3) and conv1.stride == (1, 1) and conv1.in_channels == 1
    assert isinstance(small.stem[3], nn.Identity)
    large = create_backbone("resnet50", in_channels=3, image_size=112)
    assert large.stem[0].kernel_size == (7, 7) and isinstance(large.stem[3], nn.MaxPool2d)
    assert large.out_features == 2048


def test_gem_pooling_hand_computed():
    x = torch.tensor([1.0, 2.0]).view(1, 1, 1, 2)
    gem = GeM(p=3.0)
    assert gem(x).item() == pytest.approx(((1 + 8) / 2) ** (1 / 3), rel=1e-5)
    gem1 = GeM(p=1.0)
    assert gem1(x).item() == pytest.approx(1.5, rel=1e-6)
    net = create_backbone("tiny", in_channels=1, pooling="gem")
    assert any(isinstance(m, GeM) for m in net.modules())
    with pytest.raises(BadInputError, match="pooling"):
        create_backbone("tiny", pooling="max")


def test_embedding_model_forward_and_embed():
    torch.manual_seed(0)
    model = build_embedding_model("tiny", 8, in_channels=1, image_size=16).eval()
    assert isinstance(model, EmbeddingModel)
    x = torch.rand(3, 1, 16, 16) * 2 - 1
    raw, unit = model(x), model.embed(x)
    assert raw.shape == (3, 8)
    assert torch.allclose(unit.norm(dim=1), torch.ones(3), atol=1e-6)
    assert torch.allclose(unit, torch.nn.functional.normalize(raw, dim=1))


def test_bn_linear_neck_is_the_linear_image_of_normalised_features():
    """neck bn-linear: z = W BN(x), no bias and nothing after the map (the d-Simplex code's fc1)."""
    torch.manual_seed(0)
    model = build_embedding_model("tiny", 8, in_channels=1, image_size=16, neck="bn-linear")
    assert model.proj.bias is None and model.bn.num_features == model.backbone.out_features
    model.train()(torch.rand(16, 1, 16, 16) * 2 - 1)  # move the running stats
    model.eval()
    x = torch.rand(5, 1, 16, 16) * 2 - 1
    f = model.backbone(x)
    bn = model.bn
    by_hand = (f - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias
    torch.testing.assert_close(model(x), by_hand @ model.proj.weight.T)
    default = build_embedding_model("tiny", 8, in_channels=1, image_size=16)
    assert default.neck == "linear-bn" and default.proj.bias is not None
    assert default.bn.num_features == 8  # the BNNeck normalises the embedding itself
    with pytest.raises(BadInputError, match="neck: unknown 'bn'; known: linear-bn, bn-linear"):
        build_embedding_model("tiny", 8, in_channels=1, image_size=16, neck="bn")


def test_local_weights_initialise_a_backbone(tmp_path):
    torch.manual_seed(1)
    src = create_backbone("tiny", in_channels=1)
    path = tmp_path / "tiny.safetensors"
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(path))
    torch.manual_seed(2)
    dst = create_backbone("tiny", in_channels=1, weights=path)
    for k, v in src.state_dict().items():
        assert torch.equal(v, dst.state_dict()[k]), k


def test_local_weights_must_fit(tmp_path):
    src = create_backbone("tiny", in_channels=3)
    path = tmp_path / "rgb.safetensors"
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(path))
    with pytest.raises(BadInputError, match="shape"):
        create_backbone("tiny", in_channels=1, weights=path)
    with pytest.raises(BadInputError, match="do not match"):
        create_backbone("small-cnn", in_channels=3, weights=path)
    with pytest.raises(NotFoundError):
        create_backbone("tiny", weights=tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(BadInputError, match="not a safetensors file"):
        create_backbone("tiny", weights=bad)
