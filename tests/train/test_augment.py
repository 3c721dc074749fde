"""The vectorised shift equals a per-sample pad-and-crop loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compat.train.augment import augment, draw, shift_images
from compat.train.config import AugmentConfig


def reference(images: np.ndarray, shifts: np.ndarray, mode: str, flips=None) -> np.ndarray:
    n, h, w, _ = images.shape
    k = int(np.abs(shifts).max())
    out = np.empty_like(images)
    for i in range(n):
        img = images[i][:, ::-1] if flips is not None and flips[i] else images[i]
        pad = np.pad(img, ((k, k), (k, k), (0, 0)), mode="edge" if mode == "edge" else "constant")
        dy, dx = shifts[i]
        out[i] = pad[k - dy : k - dy + h, k - dx : k - dx + w]
    return out


@pytest.mark.parametrize("mode", ["edge", "zero"])
def test_matches_per_sample_pad_and_crop(mode):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(16, 9, 9, 3), dtype=np.uint8)
    shifts = rng.integers(-3, 4, size=(16, 2))
    fast = shift_images(torch.from_numpy(images), torch.from_numpy(shifts), mode).numpy()
    assert np.array_equal(fast, reference(images, shifts, mode))


def test_flip_then_shift():
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(8, 6, 6, 1), dtype=np.uint8)
    shifts = rng.integers(-2, 3, size=(8, 2))
    flips = rng.random(8) < 0.5
    fast = shift_images(
        torch.from_numpy(images), torch.from_numpy(shifts), "edge", torch.from_numpy(flips)
    ).numpy()
    assert np.array_equal(fast, reference(images, shifts, "edge", flips))


def test_draw_is_seeded_and_config_independent_in_count():
    cfg = AugmentConfig(shift=2)
    a = draw(10, cfg, torch.Generator().manual_seed(3))
    b = draw(10, cfg, torch.Generator().manual_seed(3))
    assert torch.equal(a.shifts, b.shifts) and a.shifts.abs().max() <= 2
    assert not a.flips.any()  # hflip off
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    draw(10, cfg, g1)
    draw(10, AugmentConfig(shift=0, hflip=True), g2)
    assert torch.equal(g1.get_state(), g2.get_state())
    images = torch.zeros(10, 4, 4, 1, dtype=torch.uint8)
    assert augment(images, a, AugmentConfig(shift=0)) is images
