"""Which rows of a stored gallery a backfill upgrades, and what version every row has.

Row versions. A bundle says which version made its rows either once for all rows (``version``)
or per row (``row_versions``, written by a partial backfill); ``row_versions`` wins when both
are present. A gallery that records neither cannot be checked against ``--from`` and is refused
unless the caller vouches for it (``assume=<version>``).

Selection. ``fraction`` F is the share of the *whole* gallery that is in the new version once
the backfill is done: floor(F x n) rows (rows already upgraded by an earlier run count). The
rows still to upgrade are taken in ``order``:

- ``oldest``: by row position, first rows first (galleries append items as they enrol, so the
  first rows are the oldest);
- ``random``: a permutation of all rows seeded by ``seed``.

With the same order (and seed), a larger F extends the set a smaller F chose, so a gallery can
be moved in steps (0.25, then 0.5, ...) and running the same command twice changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compat.errors import BadInputError

ORDERS = ("oldest", "random")


def row_versions(
    version: str | None,
    per_row: Sequence[str] | None,
    n: int,
    *,
    where: str = "gallery",
    assume: str | None = None,
) -> list[str]:
    """Every row's version: ``per_row``, else ``version`` for all, else ``assume`` (or raise)."""
    if per_row is not None:
        return [str(v) for v in per_row]
    if version is not None:
        return [version] * n
    if assume is not None:
        return [assume] * n
    raise BadInputError(
        f"{where}: version: the gallery records no version (neither version nor row_versions), "
        "so it cannot be checked against --from; pass --assume-from if you know it"
    )


def bundle_version(versions: Sequence[str]) -> str | None:
    """The bundle-level ``version`` of rows: the one version they share, None when mixed."""
    distinct = set(versions)
    return next(iter(distinct)) if len(distinct) == 1 else None


def check_rows(versions: Sequence[str], source: str, target: str, where: str = "gallery") -> None:
    """Every row must be from ``source`` or already upgraded to ``target``."""
    v = np.asarray(versions, dtype=np.str_)
    bad = np.flatnonzero((v != source) & (v != target))
    if bad.size:
        i = int(bad[0])
        mixed = len(np.unique(v)) > 1
        field = "row_versions" if mixed else "version"
        raise BadInputError(
            f"{where}: {field}: row {i} was made by {str(v[i])!r}, not by --from {source!r}"
            + (f" (or --to {target!r})" if mixed else "")
        )


def row_order(n: int, order: str, seed: int = 0) -> np.ndarray:
    """All row indices in the order in which rows are upgraded."""
    if order == "oldest":
        return np.arange(n, dtype=np.int64)
    if order == "random":
        return np.random.default_rng([seed, 0xBAC4F111]).permutation(n).astype(np.int64)
    raise BadInputError(f"order: unknown {order!r}; known: {', '.join(ORDERS)}")


def target_count(n: int, fraction: float) -> int:
    """floor(fraction x n): how many rows are in the new version after the backfill."""
    if not 0.0 <= fraction <= 1.0 or math.isnan(fraction):
        raise BadInputError(f"fraction: {fraction} is not in [0, 1]")
    return min(n, math.floor(fraction * n + 1e-9))


@dataclass(frozen=True)
class Selection:
    rows: np.ndarray  # rows to upgrade now, in upgrade order
    already: int  # rows already in the target version
    total: int  # rows in the gallery

    @property
    def after(self) -> int:
        return self.already + len(self.rows)


def select_rows(
    versions: Sequence[str],
    source: str,
    target: str,
    *,
    fraction: float = 1.0,
    order: str = "oldest",
    seed: int = 0,
) -> Selection:
    """The ``source`` rows to upgrade so that floor(fraction x n) rows end up in ``target``."""
    n = len(versions)
    v = np.asarray(versions, dtype=np.str_)
    is_target = v == target
    already = int(is_target.sum())
    need = max(0, target_count(n, fraction) - already)
    ranked = row_order(n, order, seed)
    candidates = ranked[v[ranked] == source]
    return Selection(rows=candidates[:need].copy(), already=already, total=n)


__all__ = [
    "ORDERS",
    "Selection",
    "bundle_version",
    "check_rows",
    "row_order",
    "row_versions",
    "select_rows",
    "target_count",
]
