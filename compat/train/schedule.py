"""Learning-rate schedules as pure functions of the global step (nothing to checkpoint).

``cosine``: linear warm-up from 0 over the first ``warmup`` fraction of steps, then a half cosine
down to ``min_lr_ratio * lr`` at the last step: the one-cycle shape that docs/findings.md found robust
for short CPU schedules. ``step``: warm-up, then multiply by ``gamma`` at each milestone fraction.
"""

from __future__ import annotations

import math

from compat.train.config import TrainConfig


def lr_factor(step: int, total_steps: int, cfg: TrainConfig) -> float:
    """Multiplier of ``cfg.lr`` for optimizer step ``step`` (0-based) of ``total_steps``."""
    total = max(total_steps, 1)
    warm = round(cfg.warmup * total)
    if step < warm:
        return (step + 1) / warm
    if cfg.schedule == "cosine":
        span = max(total - warm - 1, 1)
        progress = min((step - warm) / span, 1.0)
        floor = cfg.min_lr_ratio
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    passed = sum(step >= round(f * total) for f in cfg.step_milestones)
    return cfg.step_gamma**passed
