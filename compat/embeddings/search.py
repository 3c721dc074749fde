"""Exact inner-product search, chunked so memory stays near the queries plus one score block.

Top-k search is a torch fp32 matmul into one reused score buffer followed by ``topk``, one block
of the gallery and one chunk of queries at a time, on the CPU or on CUDA (TF32 switched off:
compatibility criteria compare metrics that can differ by a fraction of a point, and
reduced-precision scores reorder near-ties; docs/findings.md: bf16 changes top-1 for 2.5% of
queries). On the CPU this reaches most of the plain matmul rate and over twice faiss's
``IndexFlatIP`` (``benchmarks/bench_search.py``; docs/findings.md, "Search"). A gallery larger
than one block (a memory-mapped ``.npy`` of any size) is read block by block and the running
top-k merged, so memory is bounded by the score budget, not by the gallery.

:func:`iter_scores` yields the full score matrix one query chunk at a time, for metrics that
rank the whole gallery (mAP); :func:`pair_scores` scores aligned pairs (verification).
Approximate indexes (IVF, HNSW, IVF-PQ) are :mod:`compat.embeddings.ann`.

Ties: results are ordered by decreasing score, then by increasing gallery index, exactly as
:func:`topk_reference` (a stable sort) orders them, whatever the chunking or device. The
metrics never depend on that order: they rank from the scores themselves and break ties
pessimistically (see :mod:`compat.evaluate.metrics`), so this rule only makes search results
reproducible and comparable with a brute-force reference.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from compat.errors import UsageError

# Default budget for one chunk of scores (float32, chunk_rows x n_gallery).
SCORE_CHUNK_BYTES = 256 << 20
# A gallery block is shared by at least this many query rows (BLAS needs some rows to be
# efficient); whole galleries up to SCORE_CHUNK_BYTES / (4 x MIN_QUERY_CHUNK) rows are one block.
MIN_QUERY_CHUNK = 64
MAX_QUERY_CHUNK = 4096


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
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise UsageError(
                f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
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
    budget_bytes: int = SCORE_CHUNK_BYTES,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` by inner product: ``(scores (nq, k) float32, indices (nq, k) int64)``.

    Rows are sorted by decreasing score, ties by increasing gallery index (:func:`topk_reference`
    is the brute-force definition). ``k`` must be between 1 and the gallery size. ``device``:
    ``"cpu"``, ``"cuda"``/``"cuda:N"``, or ``None`` for CUDA when available. ``gallery`` may be a
    memory-mapped array (``numpy.load(..., mmap_mode="r")``): it is read one block at a time.
    Working memory stays near ``budget_bytes`` (one block of scores) plus the queries.
    """
    q = _as_matrix(queries, "queries")
    g = gallery if _is_float32_rows(gallery) else _as_matrix(gallery, "gallery")
    if g.ndim != 2 or q.shape[1] != g.shape[1]:
        raise ValueError(f"dimension mismatch: queries have d={q.shape[1]}, gallery {g.shape}")
    if g.shape[0] == 0:
        raise ValueError("the gallery is empty")
    if not 1 <= k <= g.shape[0]:
        raise ValueError(f"k={k} must be between 1 and the gallery size {g.shape[0]}")
    dev = resolve_device(device)
    if q.shape[0] == 0:
        return np.empty((0, k), np.float32), np.empty((0, k), np.int64)
    block, step = _blocks(g.shape[0], g.shape[1], budget_bytes, chunk_size)
    return _search_torch(q, g, k, step, dev, block)


def _is_float32_rows(x: Any) -> bool:
    return (
        isinstance(x, np.ndarray) and x.ndim == 2 and x.dtype == np.float32 and x.flags.c_contiguous
    )


def _blocks(ng: int, d: int, budget: int, chunk_size: int | None) -> tuple[int, int]:
    """(gallery rows per block, query rows per chunk) so one score block fits in ``budget``.

    Whole galleries up to ``budget / (4 x MIN_QUERY_CHUNK)`` rows are one block (the matmul
    then runs with as many query rows as fit); larger ones are split so that at least
    ``MIN_QUERY_CHUNK`` query rows share each block, keeping BLAS efficient."""
    block = min(ng, max(1, budget // (4 * MIN_QUERY_CHUNK)))
    step = chunk_size or max(1, min(MAX_QUERY_CHUNK, budget // (4 * block)))
    return block, step


def topk_reference(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force top-``k`` of a full score matrix: decreasing score, ties by smaller index.

    The definition :func:`search` must reproduce exactly (a stable sort of ``-scores``)."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1).astype(np.float32), order.astype(np.int64)


def _rank(vals: np.ndarray, idx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (score desc, index asc) of each row of candidate lists."""
    order = np.lexsort((idx, -vals))[:, :k]
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(idx, order, axis=1)


def _block_topk(s: Any, k: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of each row of a torch score block (global indices, ties by index).

    ``torch.topk`` returns tied scores in no specified order and may leave out a column tied
    with the k-th; asking for k+1 shows where that can happen (the (k+1)-th equals the k-th),
    and only those rows are ranked again over every column scoring at least the k-th."""
    import torch

    n = s.shape[1]
    kk = min(k + 1, n)
    top = torch.topk(s, kk, dim=1, largest=True, sorted=True)
    vals, idx = top.values.cpu().numpy(), top.indices.cpu().numpy()
    if kk > k:
        for r in np.flatnonzero(vals[:, k] == vals[:, k - 1]).tolist():
            row = s[r].cpu().numpy()
            cand = np.flatnonzero(row >= vals[r, k - 1])
            best = cand[np.lexsort((cand, -row[cand]))[:k]]
            vals[r, :k], idx[r, :k] = row[best], best
    v, i = _rank(vals[:, :k], idx[:, :k].astype(np.int64), k)
    return v, i + offset


def _search_torch(
    q: np.ndarray, g: np.ndarray, k: int, step: int, dev: str, block: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """torch matmul + exact top-k per (gallery block, query chunk); running best merged by
    (score desc, index asc). The CPU and CUDA paths are this one function."""
    import torch

    ng = g.shape[0]
    block = block or ng
    best_v = np.full((q.shape[0], 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((q.shape[0], 0), dtype=np.int64)
    q_all = torch.from_numpy(q)
    with _fp32_matmul(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only (memory-mapped) galleries
        out = None
        for g0 in range(0, ng, block):
            g_blk = torch.from_numpy(np.ascontiguousarray(g[g0 : g0 + block])).to(dev)
            kb = min(k, g_blk.shape[0])
            vs, is_ = [], []
            for start in range(0, q.shape[0], step):
                q_dev = q_all[start : start + step].to(dev, non_blocking=True)
                rows = q_dev.shape[0]
                if out is None or out.shape[1] != g_blk.shape[0] or out.shape[0] < rows:
                    out = torch.empty((rows, g_blk.shape[0]), dtype=torch.float32, device=dev)
                s = torch.mm(q_dev, g_blk.T, out=out[:rows])
                v, i = _block_topk(s, kb, g0)
                vs.append(v)
                is_.append(i)
            v, i = np.concatenate(vs), np.concatenate(is_)
            if best_v.shape[1]:
                best_v, best_i = _rank(np.hstack([best_v, v]), np.hstack([best_i, i]), k)
            else:
                best_v, best_i = v, i
    return best_v.astype(np.float32, copy=False), best_i


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
