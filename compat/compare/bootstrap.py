"""Seeded bootstrap over queries (or probes, or pairs): confidence intervals for M and for
paired differences such as M(new, old) - M(old, old).

A resample is a row of unit multiplicities (how often each query was drawn), so every metric
of every cell is recomputed for a whole block of resamples with a few matrix operations on the
per-unit statistics a :class:`CellResult` keeps: no ranking or
search is repeated. All cells of one protocol share the same resamples, so a difference
between two cells is computed per resample ("paired"), as a gate on M(new, old) > M(old, old)
needs: the two cells are measured on the same queries and their noise largely cancels.

Intervals are percentile intervals (Efron); resamples where a metric is undefined (e.g. no
non-mated probe drawn) are ignored.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

DEFAULT_RESAMPLES = 1000
# The bounds every resamples count and seed is held to, on the command line as in params.yaml
# (``evaluate.bootstrap``, ``evaluate.seed``): 10^5 resamples of a large evaluation set already
# take a few GB, and numpy seeds a generator from 0 .. 2**32 - 1.
MAX_RESAMPLES = 100_000
MAX_SEED = 2**32 - 1
# Bound on one block of resample weights (elements), about 32 MB of int64.
_BLOCK_ELEMENTS = 4_000_000


def resample_counts(n: int, b: int, rng: np.random.Generator) -> np.ndarray:
    """(b, n) multiplicities of n units in b bootstrap resamples (each row sums to n)."""
    idx = rng.integers(0, n, size=(b, n), dtype=np.int64)
    idx += (np.arange(b, dtype=np.int64) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)


def percentile_interval(samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided percentile interval; (nan, nan) if no resample gave a defined value."""
    x = np.asarray(samples, dtype=np.float64)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return (math.nan, math.nan)
    lo, hi = np.percentile(x, [50 * (1 - confidence), 50 * (1 + confidence)])
    return (float(lo), float(hi))


def lower_bound(samples: np.ndarray, confidence: float = 0.95) -> float:
    """One-sided lower confidence bound (the (1 - confidence) quantile)."""
    x = np.asarray(samples, dtype=np.float64)
    x = x[~np.isnan(x)]
    return float(np.percentile(x, 100 * (1 - confidence))) if x.size else math.nan


@runtime_checkable
class CellResult(Protocol):
    """What the bootstrap reads from one protocol's result on one matrix cell (e.g.
    :class:`compat.evaluate.protocols.ProtocolResult`)."""

    metrics: dict[str, float]

    @property
    def units(self) -> int:
        """Resampling units (queries, probes or pairs) the metrics average over."""
        ...

    def resample(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Every metric recomputed for each row of ``weights`` (b, units) of multiplicities."""
        ...


@dataclass
class Bootstrap:
    """Resampled metric values: ``samples[key][metric]`` is a (resamples,) array."""

    resamples: int
    seed: int
    samples: dict[Hashable, dict[str, np.ndarray]] = field(default_factory=dict)

    def interval(self, key: Hashable, metric: str, confidence: float = 0.95) -> tuple[float, float]:
        return percentile_interval(self.samples[key][metric], confidence)

    def difference(self, key: Hashable, baseline: Hashable, metric: str) -> np.ndarray:
        """Per-resample M(key) - M(baseline), both measured on the same resampled units."""
        return self.samples[key][metric] - self.samples[baseline][metric]

    def difference_interval(
        self, key: Hashable, baseline: Hashable, metric: str, confidence: float = 0.95
    ) -> tuple[float, float]:
        return percentile_interval(self.difference(key, baseline, metric), confidence)

    def difference_lower_bound(
        self, key: Hashable, baseline: Hashable, metric: str, confidence: float = 0.95
    ) -> float:
        return lower_bound(self.difference(key, baseline, metric), confidence)


def bootstrap(
    results: Mapping[Hashable, CellResult],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    stream: str = "",
) -> Bootstrap:
    """Resample the units shared by ``results`` (cells of one protocol) ``resamples`` times.

    ``results`` maps a key (e.g. a (query, gallery) version pair) to a :class:`CellResult`; all of
    them must have the same number of units in the same order. ``stream`` (e.g. the protocol
    name) gives each protocol its own reproducible random stream for a given ``seed``.
    """
    boot = Bootstrap(resamples=resamples, seed=seed)
    if not results or resamples <= 0:
        return boot
    units = {r.units for r in results.values()}
    if len(units) != 1:
        raise ValueError(f"cells disagree on the number of resampling units: {sorted(units)}")
    n = units.pop()
    rng = np.random.default_rng([seed, zlib.crc32(stream.encode("utf-8"))])
    parts: dict[Hashable, dict[str, list[np.ndarray]]] = {k: {} for k in results}
    if n == 0:
        return boot
    block = max(1, min(resamples, _BLOCK_ELEMENTS // n))
    for start in range(0, resamples, block):
        # float64 once per block: every metric is a weighted sum over units.
        weights = resample_counts(n, min(block, resamples - start), rng).astype(np.float64)
        for key, result in results.items():
            for metric, values in result.resample(weights).items():
                parts[key].setdefault(metric, []).append(values)
    boot.samples = {
        key: {metric: np.concatenate(v) for metric, v in per.items()} for key, per in parts.items()
    }
    return boot
