"""The compatibility matrix of a chain of versions, update gain and sequence metrics.

``M[i][j]`` is a metric with queries embedded by version i and the gallery by version j. For a
chain v1 -> v2 -> ... only cells with gallery version at or before the query version are
needed (the lower triangle: a deployed gallery is never newer than the model querying it);
the full square is available on request. The diagonal holds the self tests M(v, v); below it,
the cross tests M(new, old).

Sequence metrics over T versions follow docs/reference.md (d-Simplex/HOC and CL2R):

* AC (average compatibility): fraction of pairs j < i with M[i][j] > M[j][j]; ``strict=False``
  counts ties as compatible (CL2R's reading, M[i][j] >= M[j][j]); the reference code's default
  treats ``<=`` as a violation, i.e. ``strict=True``.
* AA (average accuracy): mean of the lower triangle, diagonal included. Every cell counts,
  zeros too (some reference code averages the non-zero entries, which silently drops a
  version that scored 0).
* BC (backward compatibility): mean over j < T of M[T][j] - M[j][j] (last version's queries
  against every older gallery, relative to that gallery's own self test).
* FC (forward compatibility): mean over i >= 2 of M[i][i-1] - M[i][i].

All functions take a (T, T) float array indexed [query][gallery]; cells a function does not
read may be NaN. A NaN in a cell it does read makes its result NaN (never silently dropped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def matrix_cells(versions: Sequence[str], full_square: bool = False) -> list[tuple[str, str]]:
    """(query, gallery) pairs to evaluate: lower triangle with diagonal, or every pair."""
    cells = []
    for i, q in enumerate(versions):
        for j, g in enumerate(versions):
            if full_square or j <= i:
                cells.append((q, g))
    return cells


def as_array(values: dict[tuple[str, str], float], versions: Sequence[str]) -> np.ndarray:
    """``{(q, g): value}`` -> (T, T) array [query][gallery], NaN where no value was given."""
    index = {v: i for i, v in enumerate(versions)}
    out = np.full((len(versions), len(versions)), np.nan)
    for (q, g), value in values.items():
        if q in index and g in index:
            out[index[q], index[g]] = np.nan if value is None else value
    return out


def _square(m: np.ndarray) -> np.ndarray:
    a = np.asarray(m, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {a.shape}")
    return a


def ac(m: np.ndarray, strict: bool = True) -> float:
    """Average compatibility: share of pairs j < i where M[i][j] > M[j][j] (>= if not strict)."""
    a = _square(m)
    t = a.shape[0]
    if t < 2:
        return math.nan
    i, j = np.tril_indices(t, k=-1)
    cross, self_old = a[i, j], a[j, j]
    if np.isnan(cross).any() or np.isnan(self_old).any():
        return math.nan
    ok = cross > self_old if strict else cross >= self_old
    return float(ok.mean())


def aa(m: np.ndarray) -> float:
    """Average accuracy: mean of the lower triangle including the diagonal (zeros count)."""
    a = _square(m)
    return float(a[np.tril_indices(a.shape[0])].mean()) if a.shape[0] else math.nan


def bc(m: np.ndarray) -> float:
    """Backward compatibility: mean over j < T of M[T][j] - M[j][j]."""
    a = _square(m)
    t = a.shape[0]
    if t < 2:
        return math.nan
    j = np.arange(t - 1)
    return float((a[t - 1, j] - a[j, j]).mean())


def fc(m: np.ndarray) -> float:
    """Forward compatibility: mean over i >= 2 (1-based) of M[i][i-1] - M[i][i]."""
    a = _square(m)
    t = a.shape[0]
    if t < 2:
        return math.nan
    i = np.arange(1, t)
    return float((a[i, i - 1] - a[i, i]).mean())


def sequence_metrics(m: np.ndarray, strict: bool = True) -> dict[str, float]:
    return {"ac": ac(m, strict), "aa": aa(m), "bc": bc(m), "fc": fc(m)}


@dataclass(frozen=True)
class Gain:
    """Update gain (BCT Eq. 9) with whether it means anything.

    ``value`` is None when the denominator M(new*, new*) - M(old, old) is not positive (the
    paragon does not beat the old model, so there is no backfill benefit to share) or an input
    is undefined. ``meaningful`` additionally requires the criterion M(new, old) > M(old, old)
    (BCT defines the gain only for a compatible update) and a value of at most 1: the
    denominator stands for the best the new model could be without the compatibility
    constraint, so a gain above 100% says the paragon is weaker than the version it should
    bound, and the number is no share of anything (``reason`` says so).
    """

    value: float | None
    meaningful: bool
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"value": self.value, "meaningful": self.meaningful, "reason": self.reason}

    def not_meaningful(self, reason: str) -> Gain:
        """The same value, marked not meaningful for ``reason`` (e.g. a failed check)."""
        return Gain(self.value, False, reason)


PARAGON_WEAKER = (
    "paragon weaker than the version: M(new, old) beats M(new*, new*), so the paragon is no "
    "bound on a full backfill (train the paragon the way the version is trained)"
)


def update_gain(cross: float, self_old: float, paragon: float) -> Gain:
    """(M(new, old) - M(old, old)) / (M(new*, new*) - M(old, old)), BCT Eq. 9."""
    values = (cross, self_old, paragon)
    if any(v is None or math.isnan(v) for v in values):
        return Gain(None, False, "undefined input")
    denominator = paragon - self_old
    if denominator <= 0:
        return Gain(None, False, "paragon does not beat the old self test (denominator <= 0)")
    gain = (cross - self_old) / denominator  # Eq. (9)
    if cross <= self_old:
        return Gain(float(gain), False, "criterion fails: M(new, old) <= M(old, old)")
    if gain > 1.0:
        return Gain(float(gain), False, PARAGON_WEAKER)
    return Gain(float(gain), True, "criterion holds")


def gain_samples(cross: np.ndarray, self_old: np.ndarray, paragon: np.ndarray) -> np.ndarray:
    """Update gain per bootstrap resample; NaN where the denominator is not positive."""
    den = np.asarray(paragon, np.float64) - np.asarray(self_old, np.float64)
    num = np.asarray(cross, np.float64) - np.asarray(self_old, np.float64)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    ok = den > 0
    np.divide(num, den, out=out, where=ok)  # Eq. (9)
    return out
