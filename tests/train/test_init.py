"""``init: parent`` (fine-tuning): the parent's weights really load, head rows follow class names,
and every mismatch is refused before any data loads."""

from __future__ import annotations

import pytest
import torch
from train_synthetic import make_images

from compat.errors import BadInputError
from compat.models import load_head, load_version
from compat.models.embedding import build_embedding_model
from compat.models.heads import create_head
from compat.train import DataInfo, TrainConfig, train_arrays
from compat.train.init import copy_head_rows, resolve_init
from compat.train.run import plan_run

BASE = dict(backbone="tiny", dim=8, batch_size=16, epochs=1)
OLD = ["c002", "c003"]


@pytest.fixture(scope="module")
def data():
    return make_images(num_classes=4, per_class=8, size=8)


def _subset(data, classes):
    images, labels = data
    keep = [i for i, lab in enumerate(labels) if lab in classes]
    return images[keep], [labels[i] for i in keep]


def _train(root, version, cfg, data, classes):
    images, labels = _subset(data, classes)
    info = DataInfo(version, f"fp-{version}", "src", sorted(classes))
    return train_arrays(version, cfg, images, labels, info, models_dir=root, quiet=True)


@pytest.fixture(scope="module")
def parents(tmp_path_factory, data):
    """A cosface and a dsimplex parent trained on classes c002, c003 only."""
    root = tmp_path_factory.mktemp("models")
    _train(root, "p", TrainConfig(**BASE, seed=1), data, OLD)
    _train(root, "d", TrainConfig(**BASE, head="dsimplex", method="hoc", seed=2), data, OLD)
    return root


def test_fine_tuning_starts_from_the_parent(parents, data):
    # lr ~ 0: whatever the child ends with is what it started from.
    cfg = TrainConfig(**{**BASE, "lr": 1e-12, "weight_decay": 0.0}, parent="p", init="parent")
    card = _train(parents, "child", cfg, data, ["c000", "c001", *OLD])
    assert card.init == {
        "kind": "parent",
        "parent": "p",
        "parent_weights_sha256": card.parent_weights_sha256,
        "head_rows_copied": 2,
        "head_rows_new": 2,
    }
    parent, _ = load_version(parents / "p")
    child, _ = load_version(parents / "child")
    for (name, p), (_, c) in zip(parent.named_parameters(), child.named_parameters(), strict=True):
        torch.testing.assert_close(c, p, atol=1e-6, rtol=0, msg=name)
    p_head, _ = load_head(parents / "p")
    c_head, c_card = load_head(parents / "child")
    assert c_card.classes == ["c000", "c001", "c002", "c003"]
    # c002 is row 0 of the parent and row 2 of the child: rows follow the class, not the index
    torch.testing.assert_close(c_head.weight[2:], p_head.weight, atol=1e-6, rtol=0)
    assert not torch.allclose(c_head.weight[:2], p_head.weight, atol=1e-3)


def test_scratch_does_not_copy(parents, data):
    card = _train(parents, "fresh", TrainConfig(**BASE, parent="p"), data, OLD)
    assert card.init == {
        "kind": "scratch",
        "by": "init: auto: method independent trains from scratch by default",
    }
    parent, _ = load_version(parents / "p")
    fresh, _ = load_version(parents / "fresh")
    assert not torch.allclose(next(parent.parameters()), next(fresh.parameters()), atol=1e-3)


def test_dsimplex_fine_tuning_keeps_vertices(parents, data):
    cfg = TrainConfig(**BASE, head="dsimplex", method="hoc", parent="d", init="parent")
    card = _train(parents, "d2", cfg, data, ["c000", "c001", *OLD])
    assert card.classes == [*OLD, "c000", "c001"]  # the parent's classes keep their vertex
    assert (card.init["head_rows_copied"], card.init["head_rows_new"]) == (4, 0)


def test_copy_head_rows_softmax_rows_and_bias():
    torch.manual_seed(0)
    old = create_head("softmax", 4, 2)
    new = create_head("softmax", 4, 3)
    assert copy_head_rows(new, old, ["z", "b", "a"], ["a", "b"]) == (2, 1)
    torch.testing.assert_close(new.fc.weight[2], old.fc.weight[0])
    torch.testing.assert_close(new.fc.bias[1], old.fc.bias[1])
    with pytest.raises(BadInputError, match="parent's head is softmax"):
        copy_head_rows(create_head("cosface", 4, 3), old, ["a"], ["a"])


def test_copy_head_rows_linear_has_no_bias():
    torch.manual_seed(0)
    old, new = create_head("linear", 4, 2), create_head("linear", 4, 3)
    assert copy_head_rows(new, old, ["b", "c", "a"], ["a", "b"]) == (2, 1)
    torch.testing.assert_close(new.fc.weight[0], old.fc.weight[1])
    torch.testing.assert_close(new.fc.weight[2], old.fc.weight[0])
    assert new.fc.bias is None


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"init": "parent"}, r"train\.v2\.init: parent: fine-tuning needs a parent version"),
        ({"parent": "p", "init": "parent", "dim": 12}, "p has dim 8, this version 12"),
        ({"parent": "p", "init": "parent", "backbone": "small-cnn"}, "has backbone 'tiny'"),
        ({"parent": "p", "init": "parent", "pooling": "gem"}, "has pooling 'avg'"),
        ({"parent": "p", "init": "parent", "neck": "bn-linear"}, "has neck 'linear-bn'"),
        ({"parent": "p", "init": "parent", "head": "arcface"}, "has head 'cosface'"),
        (
            {"parent": "p", "init": "parent", "backbone_weights": "w.safetensors"},
            "parent and backbone_weights both initialise the backbone",
        ),
        (
            {"parent": "d", "init": "parent", "head": "cosface", "method": "bct"},
            "has head 'dsimplex', this version 'cosface'",
        ),
        (
            {"parent": "p", "bn_stats": "frozen"},
            r"train\.v2\.bn_stats: frozen keeps the starting model's BatchNorm statistics, and "
            r"this version does not start from its parent's weights \(init: scratch\)",
        ),
        ({"bn_stats": "frozen", "init": "scratch"}, r"train\.v2\.bn_stats: frozen"),
    ],
)
def test_mismatches_are_refused_before_any_data(parents, kw, match):
    with pytest.raises(BadInputError, match=match):
        plan_run("v2", TrainConfig(**{**BASE, **kw}), parents)


def test_parent_saved_without_head_is_refused(tmp_path, data):
    card = {
        "backbone": "tiny", "dim": 8, "pooling": "avg", "in_channels": 1, "image_size": 8,
        "head": "cosface", "classes": OLD, "num_classes": 2,
    }  # fmt: skip
    from compat.models import save_version

    save_version(
        tmp_path / "h", build_embedding_model("tiny", 8, in_channels=1, image_size=8), None, card
    )
    cfg = TrainConfig(**BASE, parent="h", init="parent")
    with pytest.raises(BadInputError, match="saved without its cosface head"):
        _train(tmp_path, "v2", cfg, data, OLD)
    assert not (tmp_path / "v2").exists()


def test_lwf_keeps_its_own_switch(parents, data):
    cfg = TrainConfig(**BASE, method="lwf", parent="p")
    assert _train(parents, "lwf", cfg, data, OLD).init["kind"] == "parent-model"
    cfg = TrainConfig(**BASE, method="lwf", parent="p", init="parent")
    assert _train(parents, "lwf2", cfg, data, OLD).init["head_rows_copied"] == 2


def test_auto_fine_tunes_bct_from_its_parent(parents, data):
    """init: auto (the default) starts bct from the parent's weights, as init: parent does."""
    cfg = TrainConfig(**{**BASE, "lr": 1e-12, "weight_decay": 0.0}, method="bct", parent="p")
    assert cfg.init == "auto"
    card = _train(parents, "bct-auto", cfg, data, ["c000", "c001", *OLD])
    assert card.init["kind"] == "parent"
    assert card.init["by"] == "init: auto: method bct fine-tunes its parent by default"
    assert (card.init["head_rows_copied"], card.init["head_rows_new"]) == (2, 2)
    parent, _ = load_version(parents / "p")
    child, _ = load_version(parents / "bct-auto")
    for (name, p), (_, c) in zip(parent.named_parameters(), child.named_parameters(), strict=True):
        torch.testing.assert_close(c, p, atol=1e-6, rtol=0, msg=name)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"method": "bct", "parent": "p"}, ("parent", "fine-tunes its parent by default")),
        ({"method": "bct-kd", "parent": "p"}, ("parent", "fine-tunes its parent by default")),
        ({"method": "bct", "parent": "p", "init": "scratch"}, ("scratch", None)),
        ({"method": "bct", "parent": "p", "dim": 16}, ("scratch", "parent's dim is 8")),
        ({"method": "bct", "parent": "p", "head": "arcface"}, ("scratch", "parent's head is")),
        ({"method": "l2", "parent": "p"}, ("scratch", "method l2 trains from scratch")),
        ({"method": "independent"}, ("scratch", "trains from scratch by default")),
    ],
)
def test_auto_resolves_by_method_and_architecture(parents, kw, expected):
    plan = plan_run("v2", TrainConfig(**{**BASE, **kw}), parents)
    assert plan.init == expected[0]
    if expected[1] is None:
        assert plan.init_reason is None
    else:
        assert expected[1] in plan.init_reason


def test_resolve_init_without_parent_card():
    assert resolve_init(TrainConfig(method="bct"), None, True) == (
        "scratch",
        "init: auto: no parent",
    )


def _norm_buffers(model):
    return {k: v for k, v in model.state_dict().items() if "running" in k}


@pytest.mark.parametrize(
    ("method", "params"), [("independent", {}), ("unibct", {"refresh_at": [1]})]
)
def test_frozen_bn_stats_keep_the_parents_statistics(parents, data, method, params):
    # unibct embeds with the model at the start of epoch 1 (an eval_mode pass in the middle of
    # training): the frozen layers must come out of it still in eval mode.
    kw = {**BASE, "epochs": 2, "parent": "p", "init": "parent", "method": method}
    classes = ["c000", "c001", *OLD]
    frozen = TrainConfig(**kw, method_params=params, bn_stats="frozen")
    _train(parents, f"frozen-{method}", frozen, data, classes)
    _train(parents, f"update-{method}", TrainConfig(**kw, method_params=params), data, classes)
    parent, _ = load_version(parents / "p")
    stats = _norm_buffers(parent)
    assert stats  # the tiny backbone and the linear-bn neck both hold BatchNorm layers
    child, _ = load_version(parents / f"frozen-{method}")
    for name, value in _norm_buffers(child).items():
        torch.testing.assert_close(value, stats[name], atol=0, rtol=0, msg=name)
    # the affine weights still train
    weights, trained = parent.state_dict(), child.state_dict()
    gammas = [k.replace("running_mean", "weight") for k in stats if k.endswith("running_mean")]
    assert any(not torch.allclose(trained[k], weights[k]) for k in gammas)
    updated, _ = load_version(parents / f"update-{method}")
    assert all(
        not torch.equal(v, stats[k])
        for k, v in _norm_buffers(updated).items()
        if "running_mean" in k
    )
