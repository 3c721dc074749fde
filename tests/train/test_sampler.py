"""The balanced batch sampler (IAM-CL2R's BalancedBatchSampler): half replay, half new."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from train_synthetic import make_images

from compat.errors import BadInputError
from compat.losses import create_loss
from compat.models import build_embedding_model, create_head
from compat.train import DataInfo, TrainConfig, train_arrays
from compat.train.fit import fit
from compat.train.sampler import BalancedBatches, new_items


def test_every_batch_is_half_replay_half_new():
    new = torch.tensor([False] * 6 + [True] * 40)  # 6 replay images, 40 new ones
    sampler = BalancedBatches(new, batch_size=10)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        batch = sampler.batch(gen)
        assert len(batch) == 10
        old_half, new_half = batch[:5], batch[5:]
        assert bool((old_half < 6).all()) and bool((new_half >= 6).all())
        assert len(set(new_half.tolist())) == 5  # 40 >= 5: drawn without replacement


def test_a_side_smaller_than_its_half_is_drawn_with_replacement():
    new = torch.tensor([False] * 2 + [True] * 40)
    gen = torch.Generator().manual_seed(0)
    drawn = torch.cat([BalancedBatches(new, 16).batch(gen)[:8] for _ in range(5)])
    assert set(drawn.tolist()) == {0, 1}  # 8 draws from 2 images: repeats


def test_odd_batch_gives_the_extra_image_to_the_new_half():
    new = torch.tensor([False] * 10 + [True] * 10)
    batch = BalancedBatches(new, 7).batch(torch.Generator().manual_seed(1))
    assert int((batch < 10).sum()) == 3 and int((batch >= 10).sum()) == 4


def test_no_replay_draws_whole_batches_from_the_new_images():
    sampler = BalancedBatches(torch.ones(12, dtype=torch.bool), 8)
    batch = sampler.batch(torch.Generator().manual_seed(0))
    assert len(batch) == 8 and len(set(batch.tolist())) == 8
    assert sampler.describe() == {"replay_images": 0, "new_images": 12}


def test_the_generator_decides_the_batches():
    new = torch.tensor([False] * 30 + [True] * 30)
    a = BalancedBatches(new, 8).batch(torch.Generator().manual_seed(3))
    b = BalancedBatches(new, 8).batch(torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_new_items_by_count_and_by_parent():
    labels = ["a", "b", "c", "c", "a", "d"]
    classes = ["a", "b", "c", "d"]  # an incremental split lists earlier tasks' classes first
    assert new_items(labels, classes, 2, None, "train.t2").tolist() == [
        False, False, True, True, False, True,
    ]  # fmt: skip
    assert new_items(labels, classes, None, ["a", "b", "x"], "train.t2").tolist() == [
        False, False, True, True, False, True,
    ]  # fmt: skip
    with pytest.raises(BadInputError, match=r"train.t2.new_classes: 5, but .* only 4 classes"):
        new_items(labels, classes, 5, None, "train.t2")
    with pytest.raises(BadInputError, match=r"train.t2.sampler: balanced needs .* new_classes"):
        new_items(labels, classes, None, None, "train.t2")


def test_new_classes_only_with_the_balanced_sampler():
    TrainConfig(sampler="balanced", new_classes=3)
    with pytest.raises(ValidationError, match="new_classes is read by sampler: balanced only"):
        TrainConfig(new_classes=3)
    with pytest.raises(ValidationError):
        TrainConfig(sampler="balanced", new_classes=0)


def test_fit_needs_new_items_for_the_balanced_sampler():
    images, _ = make_images(num_classes=4, per_class=8, size=8)
    model = build_embedding_model("tiny", 8, in_channels=1, image_size=8)
    cfg = TrainConfig(backbone="tiny", dim=8, batch_size=8, epochs=1, sampler="balanced")
    with pytest.raises(BadInputError, match="sampler: balanced needs new_items"):
        fit(model, create_head("linear", 8, 4), create_loss("independent"), images,
            np.arange(len(images)) % 4, cfg)  # fmt: skip


def test_balanced_training_steps_like_random_and_records_the_sampler(tmp_path):
    """A balanced run takes as many steps as a random one, repeats bit for bit, and differs from
    the random run (its batches are other images)."""
    images, labels = make_images(num_classes=6, per_class=8, size=8)
    info = DataInfo("t2", "fp", "src", sorted(set(labels)))
    base = dict(backbone="tiny", dim=8, batch_size=8, epochs=2, lr=3e-3, head="linear")
    cards, weights = {}, {}
    for name, extra in [
        ("random", {}),
        ("balanced", {"sampler": "balanced", "new_classes": 2}),
        ("again", {"sampler": "balanced", "new_classes": 2}),
    ]:
        out = tmp_path / name
        cards[name] = train_arrays(
            "t2", TrainConfig(**base, **extra), images, labels, info, models_dir=tmp_path,
            out_dir=out, checkpoint_dir=tmp_path / f"ckpt-{name}", quiet=True,
        )  # fmt: skip
        weights[name] = (out / "weights.safetensors").read_bytes()
    assert cards["balanced"].steps == cards["random"].steps == 2 * (48 // 8)
    assert cards["balanced"].config["sampler"] == "balanced"
    assert cards["balanced"].config["new_classes"] == 2
    assert weights["balanced"] == weights["again"]
    assert weights["balanced"] != weights["random"]
