"""Exact inner-product search, chunked so memory stays near gallery + queries + one score chunk.

On the CPU, top-k search is faiss's exact inner-product kernel (the one behind
``faiss.IndexFlatIP.search``), called through ``faiss.knn`` so the gallery is not copied into
an index first. On CUDA it is a torch fp32 matmul followed by ``topk``, one chunk of queries at a
time, with TF32 switched off: compatibility criteria compare metrics that can differ by a
fraction of a point, and reduced-precision scores reorder near-ties (docs/findings.md: bf16 changes
top-1 for 2.5% of queries).

:func:`iter_scores` yields the full score matrix one query chunk at a time, for metrics that
rank the whole gallery (mAP); :func:`pair_scores` scores aligned pairs (verification).

Ties: which of several equally scored gallery items is returned first is not specified (faiss
and torch differ). Metrics never depend on that order: they rank from the scores themselves
(see :mod:`compat.evaluate.metrics`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from compat.errors import UsageError

# Default budget for one chunk of scores (float32, chunk_rows x n_gallery).
SCORE_CHUNK_BYTES = 256 << 20
# faiss bounds its own working memory (blocks of 4096 queries x 1024 gallery rows), so on the
# CPU a chunk only sets how often Python regains control; bigger chunks keep BLAS efficient.
CPU_TOPK_CHUNK = 16384


def resolve_device(device: str | None = None) -> str:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"``; ``None``/``"auto"`` picks CUDA when usable.

    Auto-detection imports torch only when an NVIDIA device node exists (or torch is already
    loaded), so CPU-only command-line use does not pay torch's import time.
    """
    if device in (None, "auto"):
        if "torch" in sys.modules or os.path.exists("/dev/nvidiactl"):
            import torch

            if torch.cuda.is_available():
                return "cuda"
        return "cpu"
    assert device is not None
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"device {device!r}: CUDA is not available on this machine")
        return device
    raise UsageError(f"device {device!r}: expected 'cpu', 'cuda', 'cuda:N' or 'auto'")


def default_chunk_size(n_gallery: int, budget_bytes: int = SCORE_CHUNK_BYTES) -> int:
    """Query rows per chunk so that one chunk of float32 scores fits in ``budget_bytes``."""
    return max(1, budget_bytes // (4 * max(1, n_gallery)))


def _as_matrix(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, d), got shape {arr.shape}")
    # faiss and torch.from_numpy need C-contiguous float32; this copies only when needed.
    return np.ascontiguousarray(arr, dtype=np.float32)


def _check_pair(queries: np.ndarray, gallery: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q = _as_matrix(queries, "queries")
    g = _as_matrix(gallery, "gallery")
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"dimension mismatch: queries have d={q.shape[1]}, gallery d={g.shape[1]}")
    if g.shape[0] == 0:
        raise ValueError("the gallery is empty")
    return q, g


def search(
    queries: np.ndarray,
    gallery: np.ndarray,
    k: int,
    *,
    chunk_size: int | None = None,
    device: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` by inner product: ``(scores (nq, k) float32, indices (nq, k) int64)``.

    Rows are sorted by decreasing score. ``k`` must be between 1 and the gallery size.
    ``device``: ``"cpu"`` (faiss), ``"cuda"`` (torch), or ``None`` for CUDA when available.
    """
    q, g = _check_pair(queries, gallery)
    if not 1 <= k <= g.shape[0]:
        raise ValueError(f"k={k} must be between 1 and the gallery size {g.shape[0]}")
    dev = resolve_device(device)
    scores = np.empty((q.shape[0], k), dtype=np.float32)
    indices = np.empty((q.shape[0], k), dtype=np.int64)
    if q.shape[0] == 0:
        return scores, indices
    if dev == "cpu":
        import faiss

        step = chunk_size or CPU_TOPK_CHUNK
        for start in range(0, q.shape[0], step):
            stop = min(start + step, q.shape[0])
            d, i = faiss.knn(q[start:stop], g, k, metric=faiss.METRIC_INNER_PRODUCT)
            scores[start:stop], indices[start:stop] = d, i
        return scores, indices

    return _search_torch(q, g, k, chunk_size or default_chunk_size(g.shape[0]), dev)


def _search_torch(
    q: np.ndarray, g: np.ndarray, k: int, step: int, dev: str
) -> tuple[np.ndarray, np.ndarray]:
    """torch matmul + topk per chunk of queries, the gallery moved to ``dev`` once."""
    import torch

    scores = np.empty((q.shape[0], k), dtype=np.float32)
    indices = np.empty((q.shape[0], k), dtype=np.int64)
    with _fp32_matmul():
        g_dev = torch.from_numpy(g).to(dev)
        for start in range(0, q.shape[0], step):
            stop = min(start + step, q.shape[0])
            q_dev = torch.from_numpy(q[start:stop]).to(dev, non_blocking=True)
            top = torch.topk(q_dev @ g_dev.T, k, dim=1, largest=True, sorted=True)
            scores[start:stop] = top.values.cpu().numpy()
            indices[start:stop] = top.indices.cpu().numpy()
    return scores, indices


def iter_scores(
    queries: np.ndarray,
    gallery: np.ndarray,
    *,
    chunk_size: int | None = None,
    device: str | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(start, scores)`` with ``scores = queries[start:start + c] @ gallery.T`` (float32).

    Each chunk is a fresh array the caller may keep; holding on to only the current one keeps
    peak memory near gallery + queries + one chunk (``default_chunk_size`` rows by default).
    """
    q, g = _check_pair(queries, gallery)
    dev = resolve_device(device)
    step = chunk_size or default_chunk_size(g.shape[0])
    if dev == "cpu":
        g_t = g.T
        for start in range(0, q.shape[0], step):
            yield start, q[start : start + step] @ g_t
        return

    yield from _iter_scores_torch(q, g, step, dev)


def _iter_scores_torch(
    q: np.ndarray, g: np.ndarray, step: int, dev: str
) -> Iterator[tuple[int, np.ndarray]]:
    import torch

    with _fp32_matmul():
        g_dev = torch.from_numpy(g).to(dev)
        for start in range(0, q.shape[0], step):
            q_dev = torch.from_numpy(q[start : start + step]).to(dev, non_blocking=True)
            yield start, (q_dev @ g_dev.T).cpu().numpy()


def pair_scores(a: np.ndarray, b: np.ndarray, *, chunk_size: int = 65536) -> np.ndarray:
    """Inner products of aligned rows, ``out[i] = a[i] . b[i]`` (float32), in bounded chunks."""
    a32, b32 = _as_matrix(a, "a"), _as_matrix(b, "b")
    if a32.shape != b32.shape:
        raise ValueError(f"pair arrays must have the same shape, got {a32.shape} and {b32.shape}")
    out = np.empty(a32.shape[0], dtype=np.float32)
    for start in range(0, a32.shape[0], chunk_size):
        sl = slice(start, start + chunk_size)
        np.einsum("ij,ij->i", a32[sl], b32[sl], out=out[sl])
    return out


@contextlib.contextmanager
def _fp32_matmul() -> Iterator[Any]:
    """Full-precision fp32 matmul (no TF32) for the duration of the block, then restore."""
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
