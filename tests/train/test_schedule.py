from __future__ import annotations

import itertools
import math

import pytest

from compat.train.config import TrainConfig
from compat.train.schedule import lr_factor


def test_cosine_with_warmup():
    cfg = TrainConfig(warmup=0.2, schedule="cosine")
    f = [lr_factor(s, 10, cfg) for s in range(10)]
    assert f[0] == pytest.approx(0.5) and f[1] == pytest.approx(1.0)  # 2 warm-up steps
    assert f[2] == pytest.approx(1.0)
    assert f[-1] == pytest.approx(0.0, abs=1e-12)
    mid = 2 + 7 / 2
    assert lr_factor(int(mid), 10, cfg) == pytest.approx(0.5 * (1 + math.cos(math.pi * 3 / 7)))
    assert all(a >= b for a, b in itertools.pairwise(f[2:]))


def test_cosine_floor_and_step_schedule():
    floor = TrainConfig(warmup=0.0, min_lr_ratio=0.1)
    assert lr_factor(9, 10, floor) == pytest.approx(0.1)
    step = TrainConfig(warmup=0.0, schedule="step", step_milestones=[0.5, 0.8], step_gamma=0.1)
    assert [lr_factor(s, 10, step) for s in (0, 4, 5, 7, 8, 9)] == pytest.approx(
        [1, 1, 0.1, 0.1, 0.01, 0.01]
    )


def test_config_is_strict_and_light(heavy_imports):
    with pytest.raises(ValueError, match="Extra inputs"):
        TrainConfig(epoch=3)
    with pytest.raises(ValueError, match="step_milestones"):
        TrainConfig(step_milestones=[0.8, 0.5])
    assert heavy_imports("compat.train.config", heavy=("torch",)) == []
