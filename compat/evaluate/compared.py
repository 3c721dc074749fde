"""One metric of a :class:`compat.compare.engine.Comparison` as JSON-ready entries: the one
formatter of compared cells that the evaluate stage's reports share.

The chain report (:mod:`compat.evaluate.report`: matrix, intervals, differences, gains), the
forward section (:mod:`compat.evaluate.forward`, BiCT) and the adapted cells
(:mod:`compat.evaluate.adapted`, Drift-Adapter) each arrange these entries their own way; what
a value, an interval, a difference (BCT Eq. 2's M(new, old) - M(old, old) with its one-sided
lower bound) or an update gain (BCT Eq. 9) looks like in JSON is decided here once:
non-finite numbers are ``null`` (:func:`compat.compare.engine.num`), intervals are
``[low, high]`` lists (:func:`compat.compare.engine.num_pair`) and exist only when the
comparison was resampled. Numbers are computed by the comparison engine, never here.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from compat.compare.engine import Comparison, num, num_pair


@dataclass(frozen=True)
class ComparedMetric:
    """``metric`` of every cell of ``comparison``, formatted for a JSON report."""

    comparison: Comparison
    metric: str

    def value(self, key: Hashable) -> float | None:
        """M(key), or None (``null``) when the comparison has no such cell or it is undefined."""
        if key not in self.comparison:
            return None
        return num(self.comparison.value(key, self.metric))

    def interval(self, key: Hashable) -> list[float | None] | None:
        """M(key)'s percentile interval ``[low, high]``; None without resamples."""
        return num_pair(self.comparison.interval(key, self.metric))

    def intervals(self) -> dict[Hashable, list[float | None] | None] | None:
        """Every cell's interval, in the comparison's order; None without resamples (the
        reports then leave intervals out rather than writing nulls)."""
        if not self.comparison.resampled:
            return None
        return {key: self.interval(key) for key in self.comparison}

    def terms(self, names: Iterable[Hashable]) -> dict[Hashable, Any]:
        """The value of each of ``names`` (``null`` for a term the comparison lacks), then,
        when resampled, ``interval``: the intervals of every cell compared."""
        out: dict[Hashable, Any] = {name: self.value(name) for name in names}
        intervals = self.intervals()
        if intervals is not None:
            out["interval"] = intervals
        return out

    def difference(self, key: Hashable, baseline: Hashable) -> dict[str, Any]:
        """M(key) - M(baseline) (BCT Eq. 2's difference when key is (new, old) and baseline
        (old, old)): ``value``, and with resamples ``interval`` and ``lower_bound``."""
        return self.comparison.difference(key, baseline, self.metric).to_json()

    def gain(
        self, cross: Hashable, self_old: Hashable, paragon: Hashable, *, interval: bool = True
    ) -> dict[str, Any]:
        """The update gain of ``cross`` over ``self_old`` against ``paragon``'s self test
        (BCT Eq. 9), with its interval when ``interval`` and resampled."""
        return self.comparison.gain(
            cross, self_old, paragon, self.metric, interval=interval
        ).to_json()


__all__ = ["ComparedMetric"]
