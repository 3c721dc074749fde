"""Row-wise maps whose results do not depend on how rows are batched: fixed row blocks.

A CPU BLAS picks its kernel by the shape of the product. On one processor (AMD EPYC, AVX-512,
torch 2.14.1 with MKL) a product of 1, 2, 3, 5 or 7 rows takes another kernel than one of 4, 8
or 256 rows, and the results differ in the last bit (docs/findings.md, "Determinism"). A map
applied to whatever batch a caller happens to hold (the last, short block of a streamed
gallery; a one-row request) would then give a row a value that depends on its neighbours in the
stream. :func:`map_rows` removes that by construction: every row ``r`` of a gallery is computed
as row ``r mod block`` of a product of exactly ``block`` rows (the block of rows
``floor(r / block) * block ..``), padded with zero rows where the caller holds fewer. A row's
value then depends only on its own data, its position in its block and the block's fixed shape,
and a BLAS computes each output row without reading the other rows, so the in-memory path, a
streamed backfill in any batch size, a resumed one and a Ray worker all give the same bits on
one machine. Across processors (another kernel) the last bits may still differ.

The input of every product is copied into one 64-byte aligned buffer, so neither the caller's
memory layout nor its alignment reaches the kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Rows per product. On 2 cores psi in blocks of 256 rows ran at 0.97-1.22x the rate of plain
# products of 8,192 rows (1024 wide) and 1.48x (256 wide); 64-row blocks fell to 0.65x
# (benchmarks/bench_rowblocks.py, docs/findings.md "Determinism").
ROW_BLOCK = 256
# Rows per product on a GPU: a fixed block too, larger because a GPU runs a whole product per
# kernel launch and small blocks would only add launches.
GPU_ROW_BLOCK = 8192
_ALIGN = 64


def aligned_zeros(rows: int, cols: int) -> np.ndarray:
    """A C-contiguous float32 (rows, cols) array of zeros starting on a 64-byte boundary."""
    nbytes = rows * cols * 4
    raw = np.zeros(nbytes + _ALIGN, dtype=np.uint8)
    skip = (-raw.ctypes.data) % _ALIGN
    return raw[skip : skip + nbytes].view(np.float32).reshape(rows, cols)


def map_rows(
    fn: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    *,
    start: int = 0,
    out_dim: int,
    block: int = ROW_BLOCK,
) -> np.ndarray:
    """``fn`` applied to the rows of ``x``, which are rows ``start .. start + len(x)`` of a
    larger matrix, in fixed blocks of ``block`` rows (see the module docstring).

    ``fn`` maps a float32 (block, d) array to a (block, out_dim) array and must compute each
    output row from its input row alone (a matrix product, a row-wise normalisation). Returns
    float32 (len(x), out_dim).
    """
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    x = np.asarray(x)
    n, d = x.shape
    out = np.empty((n, out_dim), dtype=np.float32)
    if n == 0:
        return out
    buf = aligned_zeros(block, d)
    stop = start + n
    for first in range(start // block * block, stop, block):
        lo, hi = max(first, start), min(first + block, stop)
        if hi - lo < block:
            buf[:] = 0.0  # rows this call does not hold: their values reach no other row
        buf[lo - first : hi - first] = x[lo - start : hi - start]
        y = np.asarray(fn(buf))
        if y.shape != (block, out_dim):
            raise ValueError(f"fn returned shape {y.shape}, expected {(block, out_dim)}")
        out[lo - start : hi - start] = y[lo - first : hi - first]
    return out


__all__ = ["GPU_ROW_BLOCK", "ROW_BLOCK", "aligned_zeros", "map_rows"]
