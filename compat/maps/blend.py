"""Query blends: the old model's own query embedding and the adapted new one, interpolated on the
sphere (SLERP; Ricci, Biondi and Pernici, "Spherical Interpolation for Backward-Compatible
Multimodal Representations", NeurIPS 2026).

Where the old model can still embed fresh queries (the usual case: it is the model the stored
gallery was made with), a query is embedded twice: u = phi_old(x) and the adapted new query
v = adapt(phi_new(x)) (a query adapter, :mod:`compat.maps`, of any kind). The served query is
the point at ``weight`` w along the minor geodesic arc from u to v,

    q_w = (sin((1 - w) theta) u + sin(w theta) v) / sin(theta),  theta = arccos(<u, v>),   (Eq. 1)

re-normalised; w = 0 is the old model's own query (M(old, old): what the service has today),
w = 1 the adapter alone. An adapter alone is an approximate alignment of two models trained
apart; the interior of the arc can be closer to the direction retrieval needs than either end
(the paper's certification result), which held-out classes decide here: the weight is
selected per pair among ``grid`` equally spaced weights in [0, 1] by held-out mAP (ties go to
the smaller weight, the one nearer the old model; the paper uses Recall@1 on 12,637 support
pairs, mAP is steadier on a few held-out classes: :data:`SELECT_METRIC`), on a support set
disjoint from its test data, and the blend then obeys the refusal rule of every map on other
classes (:func:`compat.maps.fit.fit_map`). With a check set (classes neither model was trained
on, :mod:`compat.maps.verdict`) the weight is selected on half its classes
(:func:`select_on_set`) and the blend checked on the other half: on the new model's own training
classes its queries look better than on classes it never saw, and a weight selected there leans
towards it (0.9 where the evaluation classes wanted 0.7 to 0.8 on the embedded data, 2026-12-05).

Rows nearly parallel (theta below 1e-6 rad) use the linear interpolation Eq. 1 tends to.
Every operation is row-wise, so a row's result does not depend on its batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compat.maps.card import BlendInfo
from compat.maps.config import BlendParams

PARALLEL = 1e-6  # radians: below this angle Eq. 1 is its linear limit
# The weight's criterion: mAP, which reads the whole ranking. Top-1 on a few held-out classes
# is near its ceiling and coarse (50 validation classes: 0.87 to 0.93 over the grid), and its
# argmax there picked 0.9 where the evaluation classes wanted 0.6 (2026-12-05, findings.md).
SELECT_METRIC = "mAP"


def _unit64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def slerp(old: np.ndarray, adapted: np.ndarray, weight: float) -> np.ndarray:
    """Eq. 1 row by row: float32 (n, d) unit rows ``weight`` of the way from ``old`` (the old
    model's queries) to ``adapted`` (the adapted new queries), both (n, d), any finite scale."""
    u, v = _unit64(old), _unit64(adapted)
    if u.shape != v.shape:
        raise ValueError(f"slerp: old rows {u.shape} and adapted rows {v.shape} differ")
    cos = np.clip((u * v).sum(axis=1, keepdims=True), -1.0, 1.0)
    theta = np.arccos(cos)
    sin = np.sin(theta)
    near = theta < PARALLEL
    safe = np.where(near, 1.0, sin)
    a = np.where(near, 1.0 - weight, np.sin((1.0 - weight) * theta) / safe)
    b = np.where(near, weight, np.sin(weight * theta) / safe)
    return _unit64(a * u + b * v).astype(np.float32)


def weight_grid(points: int) -> list[float]:
    """``points`` equally spaced weights from 0 to 1, rounded to 6 digits (their card keys)."""
    return [round(i / (points - 1), 6) for i in range(points)]


def select_weight(
    old: np.ndarray,
    adapted: np.ndarray,
    labels: Sequence[Any] | None,
    params: BlendParams,
) -> BlendInfo:
    """The weight of held-out mAP highest (ties: the smaller weight) over ``params.grid``
    weights, or ``params.weight`` when fixed. ``old``: the old model's rows of the held-out
    pairs, both the queries' u and the gallery; ``adapted``: the adapted new rows. With labels,
    class retrieval (each query searches every held-out row but its own item's); without,
    recall@1 of its own row."""
    score = _scorer(np.asarray(old), labels)
    return _select(lambda w: score(slerp(old, adapted, w)), params, len(old))


def select_on_set(
    manifest: Any, old: np.ndarray, adapted: np.ndarray, params: BlendParams, name: str
) -> BlendInfo:
    """:func:`select_weight` on a held-out set as the gate measures it: identification mAP of
    the blended queries of ``manifest``'s query items against its gallery items, both in the
    old space (``old``, ``adapted``: rows of ``manifest.items``); ``name`` is recorded."""
    from compat.evaluate.manifest import evaluate_manifest, label_codes
    from compat.evaluate.protocols import Identification

    proto, codes = Identification(ks=(1,)), label_codes(manifest.labels)

    def score(w: float) -> float:
        res = evaluate_manifest(manifest, slerp(old, adapted, w), old, [proto], codes=codes)
        return float(res[proto.name].metrics[SELECT_METRIC])

    return _select(score, params, len(manifest.query)).model_copy(update={"set": name})


def _select(score: Callable[[float], float], params: BlendParams, n: int) -> BlendInfo:
    grid = [params.weight] if params.weight is not None else weight_grid(params.grid)
    scores: dict[str, float | None] = {}
    best, best_score = grid[0], -np.inf
    for w in grid:
        s = score(w)
        scores[f"{w:g}"] = None if not np.isfinite(s) else float(s)
        if np.isfinite(s) and s > best_score:
            best, best_score = w, s
    return BlendInfo(
        method=params.method, weight=best, selected_on=n, metric=SELECT_METRIC, scores=scores
    )


def _scorer(gallery: np.ndarray, labels: Sequence[Any] | None) -> Callable[[np.ndarray], float]:
    """mAP of query rows (aligned with ``gallery``) against ``gallery``, the query's own row
    excluded when labels make it class retrieval (compat's identification protocol)."""
    from compat.evaluate.protocols import Identification, evaluate_sets

    n = len(gallery)
    if labels is not None:
        index: dict[Any, int] = {}
        codes = np.asarray([index.setdefault(x, len(index)) for x in labels], dtype=np.int64)
        exclude: np.ndarray | None = np.arange(n, dtype=np.int64)
    else:
        codes, exclude = np.arange(n, dtype=np.int64), None
    proto = Identification(ks=(1,))

    def score(queries: np.ndarray) -> float:
        res = evaluate_sets([proto], queries, codes, gallery, codes, exclude=exclude,
                            device="cpu")[proto.name]  # fmt: skip
        return float(res.metrics[SELECT_METRIC])

    return score


__all__ = [
    "PARALLEL",
    "SELECT_METRIC",
    "BlendParams",
    "select_on_set",
    "select_weight",
    "slerp",
    "weight_grid",
]
