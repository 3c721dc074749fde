"""Heads against hand-computed logits on 2-d features and 3 classes."""

from __future__ import annotations

import math

import pytest
import torch

from compat.errors import BadInputError, UsageError
from compat.models.heads import HEADS, ArcFace, DSimplex, create_head, simplex_vertices

W = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
F45 = torch.tensor([[3.0, 3.0]])  # 45 degrees: cos = [r, r, -r]
R = math.sqrt(0.5)


def head_with(name: str, **kw):
    head = create_head(name, 2, 3, **kw)
    with torch.no_grad():
        head.weight.copy_(W * 5.0)  # row norms must not matter
    return head


def test_catalog_names_and_unknown_name():
    assert HEADS.names() == ["arcface", "cosface", "dsimplex", "linear", "normface", "softmax"]
    with pytest.raises(UsageError, match="known: arcface, cosface, dsimplex, linear, normface"):
        create_head("sphereface", 2, 3)


def test_softmax_is_affine():
    head = create_head("softmax", 2, 3)
    with torch.no_grad():
        head.fc.weight.copy_(W)
        head.fc.bias.copy_(torch.tensor([0.5, 0.0, -1.0]))
    out = head(F45, torch.tensor([0]))
    assert torch.allclose(out, torch.tensor([[3.5, 3.0, -4.0]]))


def test_linear_is_bias_free_and_ignores_scale_and_margin():
    """IAM-CL2R's ER classifier: logits = W f on the raw embedding, no bias, no margin."""
    head = create_head("linear", 2, 3, s=7.0, m=0.5)
    assert head.fc.bias is None and head.params() == {}
    with torch.no_grad():
        head.fc.weight.copy_(W)
    out = head(F45, torch.tensor([0]))
    assert torch.allclose(out, torch.tensor([[3.0, 3.0, -3.0]]))
    frozen = head.frozen_copy(2 * W)
    assert frozen.name == "linear" and frozen.fc.bias is None
    assert not any(p.requires_grad for p in frozen.parameters())
    assert torch.allclose(frozen(F45), 2 * out)


def test_normface_scales_cosines_and_ignores_margin():
    out = head_with("normface", s=2.0, m=0.7)(F45, torch.tensor([0]))
    assert torch.allclose(out, 2.0 * torch.tensor([[R, R, -R]]), atol=1e-6)


def test_cosface_subtracts_margin_from_target_only():
    out = head_with("cosface", s=2.0, m=0.5)(F45, torch.tensor([1]))
    assert torch.allclose(out, torch.tensor([[2 * R, 2 * (R - 0.5), -2 * R]]), atol=1e-6)
    # no targets: plain logits
    plain = head_with("cosface", s=2.0, m=0.5)(F45)
    assert torch.allclose(plain, torch.tensor([[2 * R, 2 * R, -2 * R]]), atol=1e-6)


def test_arcface_adds_angle():
    out = head_with("arcface", s=2.0, m=0.5)(F45, torch.tensor([0]))
    expected = 2.0 * math.cos(math.pi / 4 + 0.5)
    assert out[0, 0].item() == pytest.approx(expected, abs=1e-5)
    assert out[0, 1].item() == pytest.approx(2 * R, abs=1e-6)


def test_arcface_past_pi_uses_threshold_fallback():
    # target class 2 is at theta = 3pi/4; with m = 1, theta + m > pi
    m = 1.0
    out = head_with("arcface", s=2.0, m=m)(F45, torch.tensor([2]))
    fallback = -R - math.sin(math.pi - m) * m  # cos(theta) - mm
    assert out[0, 2].item() == pytest.approx(2.0 * fallback, abs=1e-5)
    # the naive cos(theta + m) would be larger (non-monotonic): the fallback avoids rewarding it
    assert math.cos(3 * math.pi / 4 + m) > fallback


def test_arcface_target_logit_decreases_with_angle():
    head = ArcFace(2, 1, s=1.0, m=0.5)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0]]))
    thetas = torch.linspace(0, math.pi, 50)
    feats = torch.stack([thetas.cos(), thetas.sin()], dim=1)
    target = head(feats, torch.zeros(50, dtype=torch.long))[:, 0]
    assert bool((target[1:] < target[:-1]).all())


def test_arcface_easy_margin_leaves_obtuse_targets_alone():
    out = head_with("arcface", s=1.0, m=0.5, easy_margin=True)(F45, torch.tensor([2]))
    assert out[0, 2].item() == pytest.approx(-R, abs=1e-6)


def test_margin_heads_compute_in_float32_and_have_finite_gradients_at_cos_one():
    head = head_with("arcface", s=2.0, m=0.5)
    f = torch.tensor([[1.0, 0.0]], requires_grad=True)  # cos = 1 exactly
    head.loss(f, torch.tensor([0])).backward()
    assert torch.isfinite(f.grad).all()
    assert head(f.bfloat16(), torch.tensor([0])).dtype == torch.float32


@pytest.mark.parametrize("k", [2, 3, 4, 11])
def test_simplex_geometry(k):
    v = simplex_vertices(k).double()
    assert v.shape == (k, k - 1)
    assert torch.allclose(v.norm(dim=1), torch.ones(k, dtype=torch.float64), atol=1e-6)
    cos = v @ v.T
    off = cos[~torch.eye(k, dtype=torch.bool)]
    assert torch.allclose(off, torch.full_like(off, -1.0 / (k - 1)), atol=1e-6)


def test_dsimplex_head_is_fixed_and_preallocated():
    head = create_head("dsimplex", 3, 2, s=1.0, m=0.0)
    assert isinstance(head, DSimplex)
    assert list(head.parameters()) == []
    assert "weight" in dict(head.named_buffers())
    assert head.capacity == 4
    assert head.params() == {"form": "linear"}  # the paper's form is the default


def test_dsimplex_default_is_the_papers_linear_form():
    # logits = W z on the unnormalised z: a vertex scaled by 7 gives 7 * cosines, target or not
    head = create_head("dsimplex", 3, 2, s=16.0, m=0.2)  # s and m do not apply
    f = simplex_vertices(4)[1:2] * 7.0
    expected = torch.tensor([[-7 / 3, 7.0, -7 / 3, -7 / 3]])
    assert head(f).shape == (1, 4)  # all K vertices, not just the 2 classes seen
    assert torch.allclose(head(f), expected, atol=1e-5)
    assert torch.allclose(head(f, torch.tensor([1])), expected, atol=1e-5)  # no margin
    loss = head.loss(f / 7.0 * 0.6, torch.tensor([1]))  # logits 0.6 and -0.2
    plain = -0.6 + math.log(math.exp(0.6) + 3 * math.exp(-0.2))  # plain cross-entropy
    assert loss.item() == pytest.approx(plain, rel=1e-5)
    frozen = head.frozen_copy(simplex_vertices(4)[:3])  # an old classifier: still linear
    assert torch.allclose(frozen(f, torch.tensor([1])), expected[:, :3], atol=1e-5)


def test_dsimplex_margin_form_is_a_fixed_cosface():
    head = create_head("dsimplex", 3, 2, s=2.0, m=0.5, form="margin")
    assert head.params() == {"form": "margin", "s": 2.0, "m": 0.5}
    f = simplex_vertices(4)[1:2] * 7.0  # the norm does not matter
    third = -1 / 3
    assert torch.allclose(head(f), 2.0 * torch.tensor([[third, 1.0, third, third]]), atol=1e-6)
    out = head(f, torch.tensor([1]))
    assert torch.allclose(out, 2.0 * torch.tensor([[third, 0.5, third, third]]), atol=1e-6)
    frozen = head.frozen_copy()
    assert torch.allclose(frozen(f, torch.tensor([1])), out, atol=1e-6)
    with pytest.raises(BadInputError, match="form must be one of linear, margin"):
        create_head("dsimplex", 3, 2, form="cosine")


def test_dsimplex_form_from_the_train_config():
    from compat.train.config import TrainConfig

    assert TrainConfig(head="dsimplex").head_params()["form"] == "linear"
    margin = TrainConfig(head="dsimplex", dsimplex_form="margin").head_params()
    assert create_head("dsimplex", 3, 2, **margin).params() == {"form": "margin", "s": 16.0,
                                                              "m": 0.2}  # fmt: skip
    assert "form" not in TrainConfig(head="cosface").head_params()


def test_dsimplex_refuses_more_classes_than_vertices():
    with pytest.raises(BadInputError, match="at most 4 classes"):
        create_head("dsimplex", 3, 5)


def test_frozen_copy_keeps_margin_rule_and_takes_new_rows():
    head = head_with("cosface", s=2.0, m=0.5)
    rows = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    copy = head.frozen_copy(rows)
    assert list(p for p in copy.parameters() if p.requires_grad) == []
    out = copy(F45, torch.tensor([0]))
    assert torch.allclose(out, torch.tensor([[2 * (R - 0.5), 2 * R]]), atol=1e-6)
