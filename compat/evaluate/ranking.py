"""The gallery ranking that identification and open-set share: each query's whole gallery
ranked once, one chunk of scores at a time, reduced to per-query statistics
(:class:`compat.evaluate.metrics.RankStats`) from which both protocols' metrics follow.

* :func:`ranking`: the per-query statistics, a query's own item left out by index
  (leave-one-out) when the query set and the gallery share items.
* :func:`template_gallery`: one template per class, the re-normalised mean of its gallery
  embeddings: the template-based 1:N gallery of the d-Simplex/HOC paper's evaluation (Biondi
  et al., CVPR'24) and of BCT's IJB-C protocols (Shen et al., CVPR'20).

:func:`compat.evaluate.protocols.evaluate_sets` decides which protocols share a ranking.
"""

from __future__ import annotations

import numpy as np

from compat.embeddings.search import iter_scores
from compat.evaluate import metrics as M


def template_gallery(gallery: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One template per gallery class: the mean of its embeddings, re-normalised to unit length.

    The template-based gallery of the d-Simplex/HOC paper's 1:N evaluation (Biondi et al.,
    CVPR'24) and of BCT's IJB-C protocols (Shen et al., CVPR'20). Returns (templates, labels),
    classes in sorted label order; a class whose mean is the zero vector keeps it (it then
    scores 0 against every query).
    """
    g = np.asarray(gallery)
    classes, inverse = np.unique(np.asarray(labels), return_inverse=True)
    sums = np.zeros((classes.size, g.shape[1]), dtype=np.float64)
    np.add.at(sums, inverse.reshape(-1), g.astype(np.float64))
    norms = np.linalg.norm(sums, axis=1, keepdims=True)  # the mean's direction is the sum's
    templates = sums / np.where(norms > 0, norms, 1.0)
    return templates.astype(g.dtype if g.dtype.kind == "f" else np.float32), classes


def ranking(
    query: np.ndarray,
    query_labels: np.ndarray,
    gallery: np.ndarray,
    gallery_labels: np.ndarray,
    *,
    exclude: np.ndarray | None = None,
    map_k: int = M.MAP_K,
    chunk_size: int | None = None,
    device: str | None = None,
) -> M.RankStats:
    """Rank the whole gallery for every query, one chunk of scores at a time.

    ``exclude[i]`` is the gallery row holding query ``i``'s own item (-1: none); it is left out
    of that query's ranking.
    """
    ql = np.asarray(query_labels)
    gl = np.asarray(gallery_labels)
    ex = None if exclude is None else np.asarray(exclude, dtype=np.int64)
    # Gallery rows grouped by label, so each query's positives are looked up, not searched for.
    order = np.argsort(gl, kind="stable")
    sorted_gl = gl[order]
    parts = []
    for start, scores in iter_scores(query, gallery, chunk_size=chunk_size, device=device):
        stop = start + scores.shape[0]
        lab = ql[start:stop]
        lo = np.searchsorted(sorted_gl, lab, side="left")
        count = np.searchsorted(sorted_gl, lab, side="right") - lo
        rows = np.repeat(np.arange(stop - start), count)
        offset = np.arange(rows.size) - np.repeat(np.cumsum(count) - count, count)
        cols = order[np.repeat(lo, count) + offset]
        if ex is not None:
            # The chunk is ours: leave each query's own item out in place (-inf, not positive).
            own = ex[start:stop]
            has = np.flatnonzero(own >= 0)
            scores[has, own[has]] = -np.inf
            keep = cols != own[rows]
            rows, cols = rows[keep], cols[keep]
        parts.append(M.rank_stats_from_positives(scores, rows, cols, k=map_k))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return M.RankStats(empty, empty, np.zeros(0), np.zeros(0), np.zeros(0), map_k)
    return M.RankStats.concat(parts)


__all__ = ["ranking", "template_gallery"]
