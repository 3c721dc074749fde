"""One compatibility-matrix cell M(q, g) on the pipeline's evaluation manifest
(``splits/eval.json``, :class:`compat.data.split.EvalManifest`).

The manifest fixes who is compared with whom: identification and open-set search its query
items against its gallery items (an item that is both is left out of its own ranking), and
verification scores its listed pairs, the first item embedded by the query version q and the
second by the gallery version g. Every caller that fills a matrix cell goes through
:func:`evaluate_manifest`: the evaluate stage's chain, forward and adapted cells, the
``compat promote`` gate and the benchmark reproduction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol as TypingProtocol

import numpy as np

from compat.evaluate.protocols import Protocol, ProtocolResult, Verification, evaluate_sets


class EvalSetLike(TypingProtocol):
    """What :func:`evaluate_manifest` reads from ``compat.data.split.EvalManifest``."""

    items: list[str]
    labels: list[str]
    query: list[int]
    gallery: list[int]
    pairs: list[tuple[int, int, bool]]


def label_codes(labels: Sequence[str]) -> np.ndarray:
    """Class names -> int64 codes (sorted order), for label comparisons in NumPy."""
    return np.unique(np.asarray(labels, dtype=np.str_), return_inverse=True)[1].astype(np.int64)


def evaluate_manifest(
    manifest: EvalSetLike,
    query_embeddings: np.ndarray,
    gallery_embeddings: np.ndarray,
    protocols: Sequence[Protocol],
    *,
    chunk_size: int | None = None,
    device: str | None = None,
    codes: np.ndarray | None = None,
) -> dict[str, ProtocolResult]:
    """One matrix cell M(q, g) on the evaluation manifest.

    ``query_embeddings`` / ``gallery_embeddings`` are (len(manifest.items), d) matrices made by
    versions q and g, rows aligned with ``manifest.items``. Identification and open-set use
    ``manifest.query`` against ``manifest.gallery``; verification uses ``manifest.pairs`` with
    the first item of each pair embedded by q and the second by g. An item that is both a query
    and a gallery entry is left out of its own ranking (by index). ``codes``: the manifest's
    :func:`label_codes`, computed once by callers that evaluate many cells.
    """
    n = len(manifest.items)
    for name, emb in (("query", query_embeddings), ("gallery", gallery_embeddings)):
        if emb.shape[0] != n:
            raise ValueError(f"{name} embeddings have {emb.shape[0]} rows for {n} manifest items")
    lab = label_codes(manifest.labels) if codes is None else codes
    q_idx = np.asarray(manifest.query, dtype=np.int64)
    g_idx = np.asarray(manifest.gallery, dtype=np.int64)
    out: dict[str, ProtocolResult] = {}
    ranking_protocols = [p for p in protocols if p.uses_ranking]
    if ranking_protocols:
        position = np.full(n, -1, dtype=np.int64)
        position[g_idx] = np.arange(g_idx.size)
        exclude = position[q_idx]
        out.update(
            evaluate_sets(
                ranking_protocols,
                query_embeddings[q_idx],
                lab[q_idx],
                gallery_embeddings[g_idx],
                lab[g_idx],
                exclude=exclude if (exclude >= 0).any() else None,
                chunk_size=chunk_size,
                device=device,
            )
        )
    for p in protocols:
        if isinstance(p, Verification):
            pairs = np.asarray(manifest.pairs, dtype=np.int64).reshape(-1, 3)
            out[p.name] = p.evaluate_pairs(
                query_embeddings, gallery_embeddings, pairs[:, 0], pairs[:, 1], pairs[:, 2] > 0
            )
        elif not p.uses_ranking:  # pragma: no cover
            raise TypeError(f"protocol {p.name!r} has no manifest evaluation path")
    return {p.name: out[p.name] for p in protocols}


__all__ = ["EvalSetLike", "evaluate_manifest", "label_codes"]
