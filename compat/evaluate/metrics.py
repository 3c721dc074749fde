"""Retrieval and verification metrics as small pure NumPy functions (docs/reference.md, "Metrics").

Conventions shared by every function here:

* ``scores`` (nq, ng) are similarities (higher = closer); ``same`` (nq, ng) is True where the
  gallery item has the query's identity.
* **Ties are broken pessimistically**: a gallery item that scores exactly as high as a correct
  match is ranked before it when it is wrong. A metric therefore never depends on the gallery's
  order, and a degenerate model (all embeddings equal) scores 0 instead of winning every tie,
  which matters for a gate that asks whether M(new, old) beats M(old, old).
* **Leave-one-out** is by index: ``exclude[i]`` is the gallery column holding query ``i``'s own
  item (-1 for none). That column is removed from the ranking and is not a positive. Labels are
  never compared to decide it.
* Queries without a positive in the gallery are *invalid*: skipped by CMC, mAP and mAP@k.
* Values are fractions in [0, 1]; NaN when undefined (no valid query, no impostor pair, ...).

Per-query statistics (:class:`RankStats`) are kept so a bootstrap can resample queries without
ranking again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Metric keys, exactly as docs/reference.md and the CLI's --json name them.
TOP_KS = (1, 5, 10)
MAP_K = 100
FARS = (0.1, 0.01, 0.001)
FPIRS = (0.1, 0.01)

# Above this many positives in a chunk's busiest query, ranking sorts the row instead of
# comparing every gallery score with every positive (cost n*P versus n*log n).
_COMPARE_MAX_POSITIVES = 64
# Bound on the boolean temporaries of the comparison path: small enough to stay in a core's
# cache between the comparison and the count (32 MiB blocks ran ~2.5x slower, measured on an
# 11k x 9k cell with 9 positives per query).
_COMPARE_BYTES = 2 << 20
# Bytes summed in one uint64 word lane before the lanes are split (a byte lane holds <= 255).
_LANE_WORDS = 255


def format_rate(rate: float) -> str:
    """0.001 -> "0.001" (positional, never scientific), so keys are unambiguous."""
    return np.format_float_positional(float(rate), trim="-")


def top_key(k: int) -> str:
    return f"top{k}"


def map_at_key(k: int) -> str:
    return f"mAP@{k}"


def tar_key(far: float) -> str:
    return f"tar@far={format_rate(far)}"


def tpir_key(fpir: float) -> str:
    return f"tpir@fpir={format_rate(fpir)}"


_RATE_NAME = re.compile(r"^(tar@far|tpir@fpir)\s*=\s*(.*?)\s*(%?)$")


def canonical_metric(name: str) -> str:
    """The one spelling of a metric name, as reports key it (torch-free; contracts use it too).

    ``"tar@far=1e-3"`` -> ``"tar@far=0.001"``, ``" tpir@fpir = 1% "`` -> ``"tpir@fpir=0.01"``:
    a rate is written positionally (:func:`format_rate`, never ``1e-05``), so the name equals
    the key :func:`tar_key` / :func:`tpir_key` give. Other names are returned stripped. A rate
    that is not a number in (0, 1) raises ValueError.
    """
    text = name.strip()
    match = _RATE_NAME.match(text)
    if not match:
        return text
    prefix, number, percent = match.groups()
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"metric {name!r}: {number!r} is not a number") from None
    if percent:
        value /= 100.0
    if not 0.0 < value < 1.0:
        raise ValueError(f"metric {name!r}: the rate must lie in (0, 1)")
    return f"{prefix}={format_rate(value)}"


# --------------------------------------------------------------------------- ranking


@dataclass
class RankStats:
    """Per-query ranking facts from which every identification/open-set metric follows.

    ``first_rank`` is the 1-based pessimistic rank of the first correct match (0: no positive);
    ``ap`` and ``ap_at_k`` are NaN for queries without a positive; ``top_score`` is the best
    score over the (non-excluded) gallery, -inf if nothing is left.
    """

    n_pos: np.ndarray  # int64 (nq,)
    first_rank: np.ndarray  # int64 (nq,)
    ap: np.ndarray  # float64 (nq,)
    ap_at_k: np.ndarray  # float64 (nq,)
    top_score: np.ndarray  # float64 (nq,)
    k: int = MAP_K

    @property
    def valid(self) -> np.ndarray:
        return self.n_pos > 0

    def __len__(self) -> int:
        return int(self.n_pos.shape[0])

    @staticmethod
    def concat(parts: Sequence[RankStats]) -> RankStats:
        if not parts:
            raise ValueError("nothing to concatenate")
        ks = {p.k for p in parts}
        if len(ks) != 1:
            raise ValueError(f"parts computed with different k: {sorted(ks)}")
        return RankStats(
            n_pos=np.concatenate([p.n_pos for p in parts]),
            first_rank=np.concatenate([p.first_rank for p in parts]),
            ap=np.concatenate([p.ap for p in parts]),
            ap_at_k=np.concatenate([p.ap_at_k for p in parts]),
            top_score=np.concatenate([p.top_score for p in parts]),
            k=ks.pop(),
        )


def _check_scores(scores: np.ndarray, same: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores)
    if not np.issubdtype(s.dtype, np.floating):
        s = s.astype(np.float64)
    m = np.asarray(same, dtype=bool)
    if s.ndim != 2 or s.shape != m.shape:
        raise ValueError(f"scores {s.shape} and same {m.shape} must be equal 2-D shapes")
    return s, m


def _apply_exclude(
    scores: np.ndarray, same: np.ndarray, exclude: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Copies of scores/same with each query's own gallery column removed (-inf, not positive)."""
    if exclude is None:
        return scores, same
    ex = np.asarray(exclude, dtype=np.int64)
    if ex.shape != (scores.shape[0],):
        raise ValueError(f"exclude must have shape ({scores.shape[0]},), got {ex.shape}")
    if (ex >= scores.shape[1]).any() or (ex < -1).any():
        raise ValueError("exclude holds a column outside the gallery")
    rows = np.flatnonzero(ex >= 0)
    if rows.size == 0:
        return scores, same
    s = np.array(scores, dtype=np.result_type(scores.dtype, np.float32), copy=True)
    m = same.copy()
    s[rows, ex[rows]] = -np.inf
    m[rows, ex[rows]] = False
    return s, m


def rank_stats(
    scores: np.ndarray,
    same: np.ndarray,
    *,
    exclude: np.ndarray | None = None,
    k: int = MAP_K,
    method: str = "auto",
) -> RankStats:
    """Per-query ranks of the correct matches and the statistics built from them.

    For a query with positives sorted by decreasing score s_1 >= ... >= s_P, the pessimistic
    rank of the j-th is r_j = #{wrong items scoring >= s_j} + j. From these:
    first_rank = r_1; AP = (1/P) sum_j j / r_j; AP@k = (1/min(P, k)) sum_{r_j <= k} j / r_j
    (GLDv2 form). ``method`` ("auto", "compare", "sort") only chooses how the counts are made;
    every method gives the same numbers (tested).
    """
    s, m = _check_scores(scores, same)
    s, m = _apply_exclude(s, m, exclude)
    rows, cols = np.nonzero(m)
    return rank_stats_from_positives(s, rows, cols, k=k, method=method)


def rank_stats_from_positives(
    scores: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    *,
    k: int = MAP_K,
    method: str = "auto",
) -> RankStats:
    """:func:`rank_stats` with the positives given as (row, column) pairs, rows ascending.

    Lets a caller that knows the labels skip building and scanning an (nq, ng) boolean matrix.
    Columns to leave out must already be ``-inf`` in ``scores`` and absent from the pairs.
    """
    s = np.asarray(scores)
    if not np.issubdtype(s.dtype, np.floating):
        s = s.astype(np.float64)
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    if rows.size > 1 and (np.diff(rows) < 0).any():
        raise ValueError("positive pairs must be grouped by ascending row")
    nq = s.shape[0]
    n_pos = np.bincount(rows, minlength=nq).astype(np.int64)
    top_score = s.max(axis=1).astype(np.float64) if s.shape[1] else np.full(nq, -np.inf)
    first_rank = np.zeros(nq, dtype=np.int64)
    ap = np.full(nq, np.nan)
    ap_at_k = np.full(nq, np.nan)
    p_max = int(n_pos.max()) if nq else 0
    if p_max > 0:
        if method == "auto":
            method = "compare" if p_max <= _COMPARE_MAX_POSITIVES else "sort"
        ps, valid = _padded_positive_scores(s, rows, cols, n_pos, p_max)
        if method == "compare":
            n_ge_all = _count_at_or_above_compare(s, ps)
        elif method == "sort":
            n_ge_all = _count_at_or_above_sort(s, ps, n_pos)
        else:
            raise ValueError(f"method must be 'auto', 'compare' or 'sort', got {method!r}")
        j = np.arange(1, p_max + 1)
        # r_j = #{wrong >= s_j} + j = #{all >= s_j} - #{right >= s_j} + j
        ranks = np.where(valid, n_ge_all - _positives_at_or_above(ps, valid) + j, 0)
        has = n_pos > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            prec = np.where(valid, j / np.where(valid, ranks, 1), 0.0)
        first_rank[has] = ranks[has, 0]
        ap[has] = prec[has].sum(axis=1) / n_pos[has]
        in_top = valid & (ranks <= k)
        ap_at_k[has] = (prec * in_top)[has].sum(axis=1) / np.minimum(n_pos[has], k)
    return RankStats(n_pos, first_rank, ap, ap_at_k, top_score, k)


def _padded_positive_scores(
    s: np.ndarray, rows: np.ndarray, cols: np.ndarray, n_pos: np.ndarray, p_max: int
) -> tuple[np.ndarray, np.ndarray]:
    """(nq, p_max) positive scores sorted descending, -inf padded, and the validity mask."""
    starts = np.cumsum(n_pos) - n_pos
    slot = np.arange(rows.size) - starts[rows]
    ps = np.full((s.shape[0], p_max), -np.inf, dtype=s.dtype)
    ps[rows, slot] = s[rows, cols]
    ps = -np.sort(-ps, axis=1)
    valid = np.arange(p_max)[None, :] < n_pos[:, None]
    return ps, valid


def _positives_at_or_above(ps: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """For each positive, how many positives of the same query score >= it (ties included)."""
    return ((ps[:, None, :] >= ps[:, :, None]) & valid[:, None, :]).sum(axis=2)


def _count_at_or_above_compare(s: np.ndarray, ps: np.ndarray) -> np.ndarray:
    """#{gallery scores >= each positive score}: one comparison per (positive, gallery item)."""
    nq, n = s.shape
    p_max = ps.shape[1]
    out = np.empty(ps.shape, dtype=np.int64)
    step = max(1, _COMPARE_BYTES // max(1, p_max * n))
    # Comparisons land in a zero-padded buffer whose rows are a whole number of uint64 words,
    # so the count can add eight bytes per machine word (see _count_true_bytes).
    width = -(-n // 8) * 8
    buf = np.zeros((min(step, nq), p_max, width), dtype=bool)
    for a in range(0, nq, step):
        b = min(a + step, nq)
        hits = buf[: b - a]
        np.greater_equal(s[a:b, None, :], ps[a:b, :, None], out=hits[..., :n])
        out[a:b] = _count_true_bytes(hits)
    return out


def _count_true_bytes(hits: np.ndarray) -> np.ndarray:
    """How many True in each row of a boolean array whose last axis is a multiple of 8.

    Adds the bytes eight at a time as uint64 words (each byte lane sums at most
    ``_LANE_WORDS`` ones, so no lane carries into the next), then adds the eight lanes. This
    is ~2x faster than numpy's byte sum with a wider accumulator, which converts every byte;
    tested against ``hits.sum(axis=-1)``.
    """
    words = hits.view(np.uint64)
    total = np.zeros(words.shape[:-1], dtype=np.int64)
    for lo in range(0, words.shape[-1], _LANE_WORDS):
        lanes = words[..., lo : lo + _LANE_WORDS].sum(axis=-1, dtype=np.uint64)
        total += lanes.view(np.uint8).reshape(*lanes.shape, 8).sum(axis=-1, dtype=np.int64)
    return total


def _count_at_or_above_sort(s: np.ndarray, ps: np.ndarray, n_pos: np.ndarray) -> np.ndarray:
    """The same counts from each sorted row (n log n per row, independent of positives)."""
    out = np.zeros(ps.shape, dtype=np.int64)
    n = s.shape[1]
    for i in np.flatnonzero(n_pos > 0):
        p = int(n_pos[i])
        out[i, :p] = n - np.searchsorted(np.sort(s[i]), ps[i, :p], side="left")
    return out


# ----------------------------------------------------------------- identification


def cmc_from_ranks(first_rank: np.ndarray, max_rank: int) -> np.ndarray:
    """CMC curve: fraction of valid queries (rank > 0) matched at rank <= r, r = 1..max_rank."""
    fr = np.asarray(first_rank)
    valid = fr > 0
    if not valid.any():
        return np.full(max_rank, np.nan)
    counts = np.bincount(np.minimum(fr[valid], max_rank + 1), minlength=max_rank + 2)
    return np.cumsum(counts[1 : max_rank + 1]) / valid.sum()


def top_k_from_ranks(first_rank: np.ndarray, k: int) -> float:
    fr = np.asarray(first_rank)
    valid = fr > 0
    return float(((fr > 0) & (fr <= k)).sum() / valid.sum()) if valid.any() else math.nan


def cmc(
    scores: np.ndarray, same: np.ndarray, max_rank: int, *, exclude: np.ndarray | None = None
) -> np.ndarray:
    """CMC curve (docs/reference.md): entry r-1 is the top-r accuracy over queries with a positive."""
    return cmc_from_ranks(rank_stats(scores, same, exclude=exclude).first_rank, max_rank)


def top_k(
    scores: np.ndarray, same: np.ndarray, k: int, *, exclude: np.ndarray | None = None
) -> float:
    """Top-k accuracy: fraction of valid queries whose first correct match is at rank <= k."""
    return top_k_from_ranks(rank_stats(scores, same, exclude=exclude).first_rank, k)


def mean_average_precision(
    scores: np.ndarray, same: np.ndarray, *, exclude: np.ndarray | None = None
) -> float:
    """mAP: mean over valid queries of AP over the whole ranked gallery."""
    return _nanmean(rank_stats(scores, same, exclude=exclude).ap)


def map_at_k(
    scores: np.ndarray, same: np.ndarray, k: int = MAP_K, *, exclude: np.ndarray | None = None
) -> float:
    """mAP@k, GLDv2 form: AP_q = (1/min(P_q, k)) sum over hits in the top k of j / r_j."""
    return _nanmean(rank_stats(scores, same, exclude=exclude, k=k).ap_at_k)


def identification_metrics(stats: RankStats, ks: Sequence[int] = TOP_KS) -> dict[str, float]:
    out = {top_key(k): top_k_from_ranks(stats.first_rank, k) for k in ks}
    out["mAP"] = _nanmean(stats.ap)
    out[map_at_key(stats.k)] = _nanmean(stats.ap_at_k)
    return out


def _nanmean(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    ok = ~np.isnan(x)
    return float(x[ok].mean()) if ok.any() else math.nan


# ------------------------------------------------------- thresholds at an error rate


def max_count(rate: float, n: np.ndarray | int) -> np.ndarray:
    """Largest integer c in [0, n] with c / n <= rate, evaluated as scikit-learn's ROC does.

    Computing c / n in floating point (rather than floor(rate * n) alone) keeps the
    order-statistic form of TAR@FAR identical to the ROC form at exact boundaries.
    """
    nn = np.asarray(n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.floor(rate * nn)
        c = np.where((c + 1) / nn <= rate, c + 1, c)
        c = np.where((c > 0) & (c / nn > rate), c - 1, c)
    return np.clip(c, 0, nn).astype(np.int64)


def impostor_threshold(impostor_scores: np.ndarray, rate: float) -> float:
    """The score an accepted trial must exceed so at most ``rate`` of impostors are accepted.

    It is the (a+1)-th largest impostor score with a = max_count(rate, n); -inf when every
    impostor may be accepted. Accepting means scoring strictly above it, so impostors tied
    with it are rejected and the realised rate never exceeds ``rate`` (no interpolation).
    """
    x = np.asarray(impostor_scores, dtype=np.float64)
    n = x.shape[0]
    if n == 0:
        return math.nan
    a = int(max_count(rate, n))
    if a >= n:
        return -math.inf
    return float(np.partition(x, n - a - 1)[n - a - 1])


def tar_at_far(scores: np.ndarray, same: np.ndarray, far: float) -> float:
    """TAR at FAR <= ``far`` from scikit-learn's ROC over verification pair scores.

    The operating point is the ROC point with the highest TAR among those whose FAR does not
    exceed ``far``: equivalently the *lowest* threshold that keeps FAR <= ``far`` (TAR falls as
    the threshold rises; read literally, "the largest threshold" would always be +inf, TAR 0).
    No interpolation between ROC points. ``drop_intermediate=False`` keeps every point, since
    dropping collinear points can remove the best admissible one. NaN if a class is missing.
    """
    from sklearn.metrics import roc_curve

    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(same, dtype=bool).ravel()
    if s.shape != y.shape:
        raise ValueError(f"scores {s.shape} and same {y.shape} must have equal length")
    if y.all() or not y.any():
        return math.nan
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return float(tpr[fpr <= far].max())


def tar_at_far_direct(scores: np.ndarray, same: np.ndarray, far: float) -> float:
    """The same number as :func:`tar_at_far` from an order statistic (no ROC); for checks."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(same, dtype=bool).ravel()
    if y.all() or not y.any():
        return math.nan
    t = impostor_threshold(s[~y], far)
    return float((s[y] > t).mean())


def tpir_at_fpir(
    top_scores: np.ndarray, correct: np.ndarray, mated: np.ndarray, fpir: float
) -> float:
    """Open-set TPIR at FPIR (docs/reference.md): 1:N identification with non-mated probes.

    ``top_scores``: each probe's best gallery score; ``correct``: its rank-1 item has the
    probe's identity (pessimistic ties); ``mated``: its identity is in the gallery. The
    threshold lets at most a fraction ``fpir`` of non-mated probes score above it
    (:func:`impostor_threshold`); TPIR = fraction of mated probes that are correct at rank 1
    *and* score above it. NaN without mated or without non-mated probes.
    """
    s = np.asarray(top_scores, dtype=np.float64)
    c = np.asarray(correct, dtype=bool)
    m = np.asarray(mated, dtype=bool)
    if m.all() or not m.any():
        return math.nan
    t = impostor_threshold(s[~m], fpir)
    return float((c[m] & (s[m] > t)).mean())


def weighted_rates_above(
    scores: np.ndarray,
    hit: np.ndarray,
    positive: np.ndarray,
    negative: np.ndarray,
    weights: np.ndarray,
    rates: Sequence[float],
) -> dict[float, np.ndarray]:
    """TAR@FAR / TPIR@FPIR for each row of unit multiplicities ``weights`` (b, n), per rate.

    Per row: the threshold is the (a+1)-th largest ``negative`` score counted with
    multiplicity, a = max_count(rate, total negative weight); the value is the weighted
    fraction of ``positive`` units that are a ``hit`` and score strictly above it. With all
    weights 1 this is :func:`impostor_threshold` followed by the
    count :func:`tar_at_far` / ``tpir_at_fpir`` make (tested).
    Sorting once and taking cumulative weights makes every rate cost O(b log n) more.
    """
    s = np.asarray(scores, dtype=np.float64)
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    b = w.shape[0]
    neg = np.flatnonzero(negative)
    pos = np.flatnonzero(positive)
    out = {r: np.full(b, np.nan) for r in rates}
    if neg.size == 0 or pos.size == 0:
        return out
    neg = neg[np.argsort(-s[neg], kind="stable")]
    neg_sorted = s[neg]
    cum_neg = np.cumsum(w[:, neg], axis=1)
    n_neg = cum_neg[:, -1]
    pos = pos[np.argsort(-s[pos], kind="stable")]
    neg_pos_scores = -s[pos]  # ascending, for searchsorted
    w_pos = w[:, pos]
    den = w_pos.sum(axis=1)
    cum_hit = np.cumsum(w_pos * np.asarray(hit, dtype=bool)[pos], axis=1)
    rows = np.arange(b)
    ok = (n_neg > 0) & (den > 0)
    for rate in rates:
        a = max_count(rate, n_neg)
        first = (cum_neg < (a + 1)[:, None]).sum(axis=1)
        thr = neg_sorted[np.minimum(first, neg_sorted.size - 1)]
        thr = np.where(a >= n_neg, -np.inf, thr)
        above = np.searchsorted(neg_pos_scores, -thr, side="left")  # positives scoring > thr
        num = np.where(above > 0, cum_hit[rows, np.maximum(above - 1, 0)], 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[rate] = np.where(ok, num / den, np.nan)
    return out
