"""Approximate nearest-neighbour indexes (faiss) for galleries too large to scan for every query.

Built by name, with parameters as ``key=value`` strings (``compat score --index ivf
--index-param nlist=1024 --index-param nprobe=32``):

==========  ================================================  ===============================
name        faiss index (inner product)                        parameters (default)
==========  ================================================  ===============================
``flat``    ``IndexFlatIP``: exact, the reference              none
``ivf``     ``IVF<nlist>,Flat``: scans ``nprobe`` of ``nlist``  ``nlist`` (4 sqrt(n)), ``nprobe`` (nlist/4, <= 32),
            k-means cells (Jegou et al., TPAMI 2011, Sec. IV)  ``train`` (rows for k-means, 64 per cell)
``hnsw``    ``HNSW<M>,Flat``: a navigable small-world graph    ``M`` (32), ``ef_construction`` (80),
            (Malkov & Yashunin, TPAMI 2020)                    ``ef_search`` (128)
``ivfpq``   ``IVF<nlist>,PQ<m>x<nbits>``: cells of product-    ``nlist``, ``nprobe``, ``train`` as ivf;
            quantised codes (Jegou et al., TPAMI 2011, Eq. 13)  ``m`` (d/4 sub-vectors), ``nbits`` (8),
                                                               ``refine`` (0: k' = refine x k re-ranked exactly)
==========  ================================================  ===============================

:func:`recall_at_k` measures an index against exact search (:func:`compat.embeddings.search.search`):
the mean share of each query's exact top-k that the index returns. On a CUDA device with a faiss
built with GPU support (the ``gpu`` extra), indexes are moved to the GPU
(``faiss.index_cpu_to_all_gpus``); HNSW has no GPU version and stays on the CPU.

The promotion gate always searches exactly (docs/design.md, "Contracts"): an approximate index
can reorder the near-ties that decide whether M(new, old) beats M(old, old).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compat.errors import UsageError

INDEX_PARAMS: dict[str, tuple[str, ...]] = {
    "flat": (),
    "ivf": ("nlist", "nprobe", "train"),
    "hnsw": ("M", "ef_construction", "ef_search"),
    "ivfpq": ("nlist", "nprobe", "train", "m", "nbits", "refine"),
}
INDEXES = tuple(INDEX_PARAMS)


@dataclass(frozen=True)
class IndexSpec:
    """An index by name plus its integer parameters (defaults filled in by :func:`build_index`)."""

    kind: str
    params: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        inner = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.kind}({inner})" if inner else self.kind


def parse_index(kind: str, params: list[str] | None = None) -> IndexSpec:
    """``("ivf", ["nlist=1024", "nprobe=16"])`` -> IndexSpec; unknown names list the known ones."""
    if kind not in INDEX_PARAMS:
        raise UsageError(f"--index {kind!r}: unknown; known: {', '.join(INDEXES)}")
    out: dict[str, int] = {}
    for item in params or []:
        key, sep, value = item.partition("=")
        if not sep or key not in INDEX_PARAMS[kind]:
            known = ", ".join(INDEX_PARAMS[kind]) or "none"
            raise UsageError(f"--index-param {item!r}: {kind} takes key=value with key in: {known}")
        try:
            out[key] = int(value)
        except ValueError:
            raise UsageError(f"--index-param {item!r}: {value!r} is not an integer") from None
        if out[key] < (0 if key == "refine" else 1):
            raise UsageError(f"--index-param {item!r}: must be positive")
    return IndexSpec(kind, out)


def resolved(spec: IndexSpec, n: int, d: int) -> IndexSpec:
    """``spec`` with every default filled in for a gallery of ``n`` rows of ``d`` dims."""
    p = dict(spec.params)
    if spec.kind in ("ivf", "ivfpq"):
        p.setdefault("nlist", max(1, min(n // 39, int(4 * math.sqrt(n)))))
        # A quarter of the cells at most: nprobe = nlist would be a full scan reported as an
        # approximate index (800 rows gave nlist 20, nprobe 20 before).
        p.setdefault("nprobe", max(1, min(32, p["nlist"] // 4)))
        codes = 2 ** p.get("nbits", 8) if spec.kind == "ivfpq" else 0
        p.setdefault("train", min(n, max(64 * p["nlist"], 64 * codes)))
    if spec.kind == "ivfpq":
        m = p.setdefault("m", max(1, d // 4))
        if d % m:
            raise UsageError(f"--index-param m={m}: must divide the dimension {d}")
        p.setdefault("nbits", 8)
        p.setdefault("refine", 0)
    if spec.kind == "hnsw":
        p.setdefault("M", 32)
        p.setdefault("ef_construction", 80)
        p.setdefault("ef_search", 128)
    return IndexSpec(spec.kind, p)


def faiss_has_gpu() -> bool:
    """Whether the installed faiss was built with GPU support and sees a GPU."""
    import faiss

    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def build_index(gallery: np.ndarray, spec: IndexSpec, *, device: str = "cpu", seed: int = 0) -> Any:
    """A faiss index over ``gallery`` (float32 rows, inner product), trained and filled."""
    import faiss

    g = np.ascontiguousarray(gallery, dtype=np.float32)
    n, d = g.shape
    spec = resolved(spec, n, d)
    p = spec.params
    ip = faiss.METRIC_INNER_PRODUCT
    if spec.kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif spec.kind == "ivf":
        index = faiss.index_factory(d, f"IVF{p['nlist']},Flat", ip)
    elif spec.kind == "ivfpq":
        refine = ",RFlat" if p["refine"] else ""
        index = faiss.index_factory(d, f"IVF{p['nlist']},PQ{p['m']}x{p['nbits']}{refine}", ip)
    else:
        index = faiss.IndexHNSWFlat(d, p["M"], ip)
        index.hnsw.efConstruction = p["ef_construction"]
    if device != "cpu" and spec.kind != "hnsw" and faiss_has_gpu():
        index = faiss.index_cpu_to_all_gpus(index)
    if not index.is_trained:
        rows = np.random.default_rng(seed).choice(n, size=min(n, p["train"]), replace=False)
        ivf = faiss.extract_index_ivf(index) if spec.kind != "flat" else None
        if ivf is not None:
            ivf.cp.max_points_per_centroid = max(1, p["train"] // max(1, p["nlist"]))
            ivf.cp.seed = seed
        index.train(g[np.sort(rows)])
    index.add(g)
    _set_search_params(index, spec)
    return index


def _set_search_params(index: Any, spec: IndexSpec) -> None:
    import faiss

    p = spec.params
    if spec.kind in ("ivf", "ivfpq"):
        faiss.extract_index_ivf(index).nprobe = p["nprobe"]
    if spec.kind == "ivfpq" and p["refine"]:
        index.k_factor = p["refine"]
    if spec.kind == "hnsw":
        index.hnsw.efSearch = p["ef_search"]


def index_search(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, indices)`` of the index's top-``k`` (-1 where it found fewer than k)."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    d, i = index.search(q, k)
    return d.astype(np.float32, copy=False), i.astype(np.int64, copy=False)


def recall_at_k(approx: np.ndarray, exact: np.ndarray) -> float:
    """Mean over queries of |approx_i intersect exact_i| / k (both (nq, k) index lists)."""
    if approx.shape != exact.shape or approx.ndim != 2:
        raise ValueError(
            f"index lists must have the same (nq, k) shape: {approx.shape}, {exact.shape}"
        )
    if approx.shape[0] == 0:
        return math.nan
    k, found = exact.shape[1], 0
    for s in range(0, approx.shape[0], 4096):  # (chunk, k, k) comparisons stay small
        a, e = approx[s : s + 4096], exact[s : s + 4096]
        found += int(((a[:, :, None] == e[:, None, :]).any(axis=2) & (a >= 0)).sum())
    return found / (approx.shape[0] * k)


__all__ = [
    "INDEXES",
    "INDEX_PARAMS",
    "IndexSpec",
    "build_index",
    "faiss_has_gpu",
    "index_search",
    "parse_index",
    "recall_at_k",
    "resolved",
]
