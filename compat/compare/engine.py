"""The comparison engine: named cells of one protocol in; values, percentile bootstrap
intervals, paired differences with their one-sided lower bounds, and update gains out.

Every report that compares matrix cells (the evaluate stage's ``metrics/compat.json``, the
forward/BiCT section, the ``compat promote`` gate, the benchmark reproduction, the sequence
summary) is a formatter over :func:`compare`; none of them computes an interval, a difference,
a bound or a gain itself.

* The criterion of BCT (Shen et al., CVPR 2020, Eq. 2) is M(new, old) > M(old, old): a
  :meth:`Comparison.difference` of the cells ``(new, old)`` and ``(old, old)`` whose lower
  bound at the required confidence must clear the margin.
* The update gain is BCT Eq. 9, (M(new, old) - M(old, old)) / (M(new*, new*) - M(old, old)):
  :meth:`Comparison.gain`, with its bootstrap interval.

All cells given to one :func:`compare` call share the same resamples (a *paired* bootstrap,
:mod:`compat.compare.bootstrap`), drawn from the random stream ``(seed, stream)`` in the order
of the mapping: the same cells in the same order give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from compat.compare.bootstrap import (
    Bootstrap,
    CellResult,
    bootstrap,
    lower_bound,
    percentile_interval,
)
from compat.compare.matrix import Gain, gain_samples, update_gain

DEFAULT_CONFIDENCE = 0.95


def num(x: float | None) -> float | None:
    """JSON-safe number: NaN, inf and None -> None (JSON has no NaN), anything else a float."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def num_pair(interval: tuple[float, float] | None) -> list[float | None] | None:
    """An interval as a JSON list ``[low, high]`` (None when there is no interval)."""
    return None if interval is None else [num(interval[0]), num(interval[1])]


@dataclass(frozen=True)
class Difference:
    """M(key) - M(baseline) on the same queries; interval and one-sided lower bound from the
    paired resamples (None without resamples)."""

    value: float
    interval: tuple[float, float] | None
    lower_bound: float | None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": num(self.value)}
        if self.interval is not None:
            out["interval"] = num_pair(self.interval)
            out["lower_bound"] = num(self.lower_bound)
        return out


@dataclass(frozen=True)
class GainEstimate:
    """An update gain (BCT Eq. 9, :class:`~compat.compare.matrix.Gain`) and the percentile
    interval of its per-resample values (None when not asked for or without resamples)."""

    gain: Gain
    interval: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.gain.to_json(), "value": num(self.gain.value)}
        if self.interval is not None:
            out["interval"] = num_pair(self.interval)
        return out


@dataclass
class Comparison:
    """The measured cells of one protocol and their shared bootstrap resamples."""

    cells: dict[Hashable, CellResult]
    boot: Bootstrap
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def resampled(self) -> bool:
        """Whether intervals and bounds exist (resamples > 0)."""
        return self.boot.resamples > 0

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.cells)

    def __contains__(self, key: object) -> bool:
        return key in self.cells

    def metrics(self, key: Hashable) -> dict[str, float]:
        return self.cells[key].metrics

    def value(self, key: Hashable, metric: str) -> float:
        return self.cells[key].metrics[metric]

    def samples(self, key: Hashable, metric: str) -> np.ndarray:
        """Per-resample values; all NaN when the cell had no units to resample."""
        per = self.boot.samples.get(key)
        if per is None or metric not in per:
            return np.full(self.boot.resamples, np.nan)
        return per[metric]

    def interval(
        self, key: Hashable, metric: str, confidence: float | None = None
    ) -> tuple[float, float] | None:
        """Percentile interval of M(key) at ``confidence`` (default: the comparison's)."""
        if not self.resampled:
            return None
        return percentile_interval(self.samples(key, metric), self._conf(confidence))

    def difference(
        self, key: Hashable, baseline: Hashable, metric: str, confidence: float | None = None
    ) -> Difference:
        """M(key) - M(baseline), e.g. M(new, old) - M(old, old) of BCT Eq. 2."""
        value = self.value(key, metric) - self.value(baseline, metric)
        if not self.resampled:
            return Difference(value, None, None)
        conf = self._conf(confidence)
        d = self.samples(key, metric) - self.samples(baseline, metric)  # paired: same resamples
        return Difference(value, percentile_interval(d, conf), lower_bound(d, conf))

    def gain(
        self,
        cross: Hashable,
        self_old: Hashable,
        paragon: Hashable,
        metric: str,
        *,
        interval: bool = True,
        confidence: float | None = None,
    ) -> GainEstimate:
        """Update gain of ``cross`` = (new, old) over ``self_old`` = (old, old) against the
        paragon's self test (BCT Eq. 9), with its interval when ``interval`` and resampled."""
        gain = update_gain(
            self.value(cross, metric), self.value(self_old, metric), self.value(paragon, metric)
        )
        if not (interval and self.resampled):
            return GainEstimate(gain)
        per = gain_samples(  # Eq. (9) per resample
            self.samples(cross, metric), self.samples(self_old, metric),
            self.samples(paragon, metric),
        )  # fmt: skip
        return GainEstimate(gain, percentile_interval(per, self._conf(confidence)))

    def _conf(self, confidence: float | None) -> float:
        return self.confidence if confidence is None else confidence


def compare(
    cells: Mapping[Hashable, CellResult],
    *,
    resamples: int,
    seed: int = 0,
    stream: str = "",
    confidence: float = DEFAULT_CONFIDENCE,
) -> Comparison:
    """Measure and resample ``cells`` (one protocol's results keyed by cell name, all on the
    same units) together: ``resamples`` paired bootstrap draws from the stream
    ``(seed, stream)``; ``confidence`` is the default level of intervals and bounds."""
    cells = dict(cells)
    boot = bootstrap(cells, resamples=resamples, seed=seed, stream=stream)
    return Comparison(cells, boot, confidence)


__all__ = [
    "DEFAULT_CONFIDENCE",
    "CellResult",
    "Comparison",
    "Difference",
    "GainEstimate",
    "compare",
    "num",
    "num_pair",
]
