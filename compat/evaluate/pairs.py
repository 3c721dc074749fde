"""Verification pairs: formed from two labelled sets, and scored.

* :func:`label_pairs`: the (query row, gallery row, genuine) pairs of ``compat score``'s
  verification, where no manifest lists pairs: every query x gallery pair when they fit in
  ``max_pairs``, else a seeded sample (rules in its docstring). The evaluation manifest's own
  pairs (``splits/eval.json``) are made by the ``split`` stage and read by
  :func:`compat.evaluate.manifest.evaluate_manifest`.
* :func:`indexed_pair_scores`: the inner product of each pair, gathered a bounded chunk at a
  time so a million pairs never hold a million rows of each set at once.
"""

from __future__ import annotations

import numpy as np

from compat.embeddings.search import pair_scores

DEFAULT_MAX_PAIRS = 1_000_000


def label_pairs(
    query_labels: np.ndarray,
    gallery_labels: np.ndarray,
    *,
    exclude: np.ndarray | None = None,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Verification pairs (query row, gallery row, genuine) formed from two labelled sets.

    * If there are at most ``max_pairs`` query x gallery pairs, every pair is used: the result
      is exact and involves no randomness.
    * Otherwise a seeded sample: genuine pairs (same label) are all kept if they fit in half of
      ``max_pairs``, else that many are drawn uniformly without replacement; impostor pairs
      (different labels) are drawn uniformly without replacement to fill ``max_pairs``.
    * A query's own item (``exclude``) never forms a pair with it.

    Pairs are returned sorted by (query row, gallery row).
    """
    ql = np.asarray(query_labels)
    gl = np.asarray(gallery_labels)
    nq, ng = ql.shape[0], gl.shape[0]
    ex = np.full(nq, -1, dtype=np.int64) if exclude is None else np.asarray(exclude, np.int64)
    if nq * ng <= max_pairs:
        qi = np.repeat(np.arange(nq, dtype=np.int64), ng)
        gi = np.tile(np.arange(ng, dtype=np.int64), nq)
        keep = gi != ex[qi]
        qi, gi = qi[keep], gi[keep]
        return qi, gi, ql[qi] == gl[gi]

    rng = np.random.default_rng([seed, 0x5A1])
    gq, gg = _genuine_pairs(ql, gl, ex, max_pairs // 2, rng)
    n_imp = max_pairs - gq.shape[0]
    iq, ig = _impostor_pairs(ql, gl, ex, n_imp, rng)
    qi = np.concatenate([gq, iq])
    gi = np.concatenate([gg, ig])
    order = np.lexsort((gi, qi))
    qi, gi = qi[order], gi[order]
    return qi, gi, ql[qi] == gl[gi]


def _genuine_pairs(
    ql: np.ndarray, gl: np.ndarray, ex: np.ndarray, cap: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Same-label pairs, all of them or ``cap`` drawn uniformly without replacement."""
    q_order = np.argsort(ql, kind="stable")
    g_order = np.argsort(gl, kind="stable")
    sq, sg = ql[q_order], gl[g_order]
    classes = np.intersect1d(sq, sg)
    q_lo = np.searchsorted(sq, classes, side="left")
    g_lo = np.searchsorted(sg, classes, side="left")
    n_q = np.searchsorted(sq, classes, side="right") - q_lo
    n_g = np.searchsorted(sg, classes, side="right") - g_lo
    sizes = n_q * n_g  # one block of n_q x n_g pairs per shared label
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    draw = np.arange(total) if total <= cap else np.sort(rng.choice(total, cap, replace=False))
    ends = np.cumsum(sizes)
    block = np.searchsorted(ends, draw, side="right")
    offset = draw - (ends[block] - sizes[block])
    qi = q_order[q_lo[block] + offset // n_g[block]]
    gi = g_order[g_lo[block] + offset % n_g[block]]
    keep = gi != ex[qi]
    return qi[keep], gi[keep]


def _impostor_pairs(
    ql: np.ndarray, gl: np.ndarray, ex: np.ndarray, need: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``need`` different-label pairs drawn uniformly without replacement (rejection sampling)."""
    nq, ng = ql.shape[0], gl.shape[0]
    chosen = np.zeros(0, dtype=np.int64)
    for _ in range(64):
        if chosen.size >= need:
            break
        lin = rng.integers(0, nq * ng, size=2 * (need - chosen.size) + 16, dtype=np.int64)
        qi, gi = lin // ng, lin % ng
        ok = (ql[qi] != gl[gi]) & (gi != ex[qi])
        # Keep first occurrences in draw order so the sample stays uniform.
        merged = np.concatenate([chosen, lin[ok]])
        _, first = np.unique(merged, return_index=True)
        chosen = merged[np.sort(first)]
    chosen = chosen[:need]
    return chosen // ng, chosen % ng


def indexed_pair_scores(
    a: np.ndarray, b: np.ndarray, ia: np.ndarray, ib: np.ndarray, chunk: int = 65536
) -> np.ndarray:
    """``a[ia[i]] . b[ib[i]]`` for every i, gathering one bounded chunk of rows at a time."""
    ia = np.asarray(ia, dtype=np.int64)
    ib = np.asarray(ib, dtype=np.int64)
    out = np.empty(ia.shape[0], dtype=np.float32)
    for s in range(0, ia.shape[0], chunk):
        out[s : s + chunk] = pair_scores(a[ia[s : s + chunk]], b[ib[s : s + chunk]])
    return out


__all__ = ["DEFAULT_MAX_PAIRS", "indexed_pair_scores", "label_pairs"]
