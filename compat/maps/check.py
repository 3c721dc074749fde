"""The refusal rule every fitted map obeys: beat the baseline on held-out data, with the gate's
bootstrap confidence.

The rule is psi's (:mod:`compat.maps.psi_fit`) measured the way the gate measures: whole
classes of the pairs are held out (rows, without labels; :func:`compat.maps.psi_heldout.
heldout_split`), the map is fitted on the rest, and top-1 retrieval on the held-out pairs is
scored by compat's own identification protocol (:mod:`compat.evaluate.protocols`, pessimistic
ties) for the map and for its baseline, on the same queries. The paired bootstrap of the
comparison engine (:func:`compat.compare.engine.compare`; percentile, one-sided) gives the lower bound
of the difference; the map is kept only when that bound at ``confidence`` is above
``min_gain`` (BCT's criterion, Shen et al. CVPR 2020 Eq. 2, read for "with the map" against
"without it").

Retrieval. With labels: class retrieval, each query searching every held-out gallery row but
its own item's (the query's image is not in the gallery, as at evaluation). Without labels:
pair retrieval, recall@1 of finding each item's own row.

Cells, for a **query adapter** (new -> old; Drift-Adapter, Vejendla EMNLP 2025): ``mapped`` =
adapter(new queries) against the old rows; ``no-map`` = the raw new rows against the old rows
(two widths: the first coordinates of the wider side, BCT's ``truncate``); ``old-self`` = the
old rows against themselves, the old model's self test M(old, old). For a **gallery map**
(old -> new, psi's direction) the new rows query map(old rows), the raw old rows, and the old
self test likewise.

Baseline: ``no-map``, unless the pair is incompatible, that is the widths differ or the raw
rows' one-sided bootstrap lower bound of top-1 is at most ``near_chance`` x chance; then ``old-self``: the mapped pair must serve
the old gallery better than the old model does. ``old-self`` needs labels (pair retrieval of a
row among its own rows is trivially 1), so without labels the baseline is always ``no-map``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compat.maps.card import HeldOut, MapRefusal
from compat.maps.config import CheckConfig

METRIC = "top1"


def _codes(labels: Sequence[Any]) -> np.ndarray:
    index: dict[Any, int] = {}
    return np.asarray([index.setdefault(x, len(index)) for x in labels], dtype=np.int64)


def _chance(codes: np.ndarray, leave_one_out: bool) -> float:
    """Expected top-1 of a random ranking: mean over queries with a positive of P_q / G_q."""
    n = len(codes)
    pos = np.bincount(codes)[codes] - (1 if leave_one_out else 0)
    gallery = n - (1 if leave_one_out else 0)
    ok = pos > 0
    return float((pos[ok] / gallery).mean()) if ok.any() and gallery > 0 else math.nan


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def check_map(
    apply: Callable[[np.ndarray], np.ndarray],
    source: np.ndarray,
    target: np.ndarray,
    labels: Sequence[Any] | None,
    cfg: CheckConfig,
    *,
    role: str = "query-adapter",
    kind: str = "map",
    split: str = "rows",
    num_fit: int = 0,
) -> tuple[HeldOut, MapRefusal | None]:
    """The held-out check of a map (``apply``: source rows -> target-space rows) on the held-out
    pairs ``source`` / ``target`` (unit rows); returns the numbers and, when the map is refused,
    why (None: kept, or ``cfg.refuse`` off)."""
    from compat.compare.bootstrap import lower_bound
    from compat.compare.engine import compare
    from compat.embeddings.dims import align_pair
    from compat.evaluate.protocols import Identification, evaluate_sets

    n = len(source)
    labelled = labels is not None
    codes = _codes(labels) if labelled else np.arange(n, dtype=np.int64)
    exclude = np.arange(n, dtype=np.int64) if labelled else None
    base: dict[str, Any] = {
        "metric": METRIC, "retrieval": "class" if labelled else "pair", "split": split,
        "num_fit": num_fit, "num_heldout": n, "confidence": cfg.confidence,
        "min_gain": cfg.min_gain, "resamples": cfg.resamples,
    }  # fmt: skip
    if n < 2:
        held = HeldOut(queries=0, **base)
        return held, _nothing(cfg, kind, f"{n} held-out pair(s)", held)

    proto = Identification(ks=(1,))

    def cell(queries: np.ndarray, gallery: np.ndarray) -> Any:
        return evaluate_sets(
            [proto], queries, codes, gallery, codes, exclude=exclude, device="cpu"
        )[proto.name]

    mapped_rows = apply(source)
    same_dim = source.shape[1] == target.shape[1]
    if role == "query-adapter":
        cells = {"mapped": cell(mapped_rows, target)}
        cells["no-map"] = cell(*align_pair(source, target, "truncate"))
        self_rows = target
    else:  # gallery-map: the new rows (target) query the mapped or raw old rows (source)
        cells = {"mapped": cell(target, mapped_rows)}
        cells["no-map"] = cell(*align_pair(target, source, "truncate"))
        self_rows = source
    if labelled:
        cells["old-self"] = cell(self_rows, self_rows)
    chance = _chance(codes, labelled)
    no_map = cells["no-map"].metrics[METRIC]
    queries = int(cells["mapped"].counts.get("valid_queries", 0))
    comparison = compare(  # every cell on the same resamples: differences are paired
        cells, resamples=cfg.resamples, seed=cfg.seed, stream=f"maps/{role}",
        confidence=cfg.confidence,
    )  # fmt: skip
    # Near chance: the raw rows' one-sided lower bound is not above near_chance x chance (a
    # point value of a few hits on a small held-out set is noise, not compatibility).
    no_map_low = lower_bound(comparison.samples("no-map", METRIC), cfg.confidence)
    incompatible = not same_dim or not (no_map_low > cfg.near_chance * chance)
    kind_of_base = "old-self" if labelled and incompatible else "no-map"
    diff = comparison.difference("mapped", kind_of_base, METRIC)
    mapped, baseline = cells["mapped"].metrics[METRIC], cells[kind_of_base].metrics[METRIC]
    held = HeldOut(
        queries=queries,
        mapped=_finite(mapped),
        baseline=_finite(baseline),
        baseline_kind=kind_of_base,  # type: ignore[arg-type]
        no_map=_finite(no_map),
        no_map_lower_bound=_finite(no_map_low),
        old_self=_finite(cells["old-self"].metrics[METRIC]) if labelled else None,
        chance=_finite(chance),
        difference=_finite(diff.value),
        lower_bound=_finite(diff.lower_bound),
        interval=None if diff.interval is None else [_finite(v) for v in diff.interval],
        **base,
    )
    if queries == 0:
        return held, _nothing(cfg, kind, "no held-out query has a mate", held)
    lower = diff.lower_bound if diff.lower_bound is not None else math.nan
    if not cfg.refuse or lower > cfg.min_gain:
        return held, None
    what = {
        "no-map": "without it (the raw rows" + ("" if same_dim else ", truncated") + ")",
        "old-self": "the old model's self test M(old, old)"
        + (" (the widths differ)" if not same_dim else " (the raw rows are near chance)"),
    }[kind_of_base]
    reason = (
        f"held-out top-1 {mapped:.4f} with the {kind} map against {baseline:.4f} {what}: the "
        f"gain's {cfg.confidence:g} lower bound {lower:+.4f} is not above {cfg.min_gain:g} "
        f"({queries} queries of held-out {split}, {cfg.resamples} bootstrap resamples)"
    )
    return held, MapRefusal(
        reason=reason,
        mapped=_finite(mapped),
        baseline=_finite(baseline),
        baseline_kind=kind_of_base,  # type: ignore[arg-type]
        lower_bound=_finite(lower),
    )


def _nothing(cfg: CheckConfig, kind: str, why: str, held: HeldOut) -> MapRefusal | None:
    if not cfg.refuse:
        return None
    return MapRefusal(
        reason=f"nothing to check the {kind} map on: {why} (val_fraction "
        f"{cfg.val_fraction:g} of {held.num_fit + held.num_heldout} pairs); an unchecked map is "
        "not kept"
    )


__all__ = ["METRIC", "check_map"]
