"""Exact search against a brute-force reference (ties tolerated), chunking and devices."""

from __future__ import annotations

import numpy as np
import pytest

from compat.embeddings import search as S
from compat.errors import UsageError


def _check_topk(q, g, k, scores, idx):
    """Tie-tolerant: returned scores equal the reference's k best, and each index has its score."""
    full = q.astype(np.float64) @ g.astype(np.float64).T
    ref = -np.sort(-full, axis=1)[:, :k]
    np.testing.assert_allclose(scores, ref, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.take_along_axis(full, idx, axis=1), scores, rtol=0, atol=1e-5)
    assert all(len(set(row)) == k for row in idx.tolist())  # no item returned twice
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # sorted by decreasing score


def _smallest_gap(q, g, k):
    """Smallest float64 gap between consecutive scores among each row's k + 1 best: an exact
    index comparison between two float32 paths is safe only when this is far above their
    rounding."""
    top = -np.sort(-(q.astype(np.float64) @ g.astype(np.float64).T), axis=1)[:, : k + 1]
    return float(-np.diff(top, axis=1).max())


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_search_matches_brute_force_with_ties(chunk):
    rng = np.random.default_rng(0)
    # Small integer vectors: many exactly tied scores.
    q = rng.integers(-1, 2, (23, 5)).astype(np.float32)
    g = rng.integers(-1, 2, (40, 5)).astype(np.float32)
    scores, idx = S.search(q, g, 10, chunk_size=chunk, device="cpu")
    assert scores.dtype == np.float32 and idx.dtype == np.int64 and idx.shape == (23, 10)
    _check_topk(q, g, 10, scores, idx)


def test_search_without_ties_returns_the_reference_indices():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((50, 16)).astype(np.float32)
    g = rng.standard_normal((300, 16)).astype(np.float32)
    _scores, idx = S.search(q, g, 5, device="cpu")
    ref = np.argsort(-(q.astype(np.float64) @ g.T.astype(np.float64)), axis=1)[:, :5]
    # float32 torch scores vs a float64 reference rank the same only without near-ties: 16-term
    # float32 sums of N(0, 1) products are off by < 1e-4 on any kernel; the data keep > 1e-3.
    assert _smallest_gap(q, g, 5) > 1e-3
    np.testing.assert_array_equal(idx, ref)


def test_search_equals_faiss_index_flat_ip_and_accepts_any_layout():
    import faiss

    rng = np.random.default_rng(2)
    q = rng.standard_normal((30, 8))  # float64, converted
    g = np.asfortranarray(rng.standard_normal((100, 8)).astype(np.float32))  # not C-contiguous
    index = faiss.IndexFlatIP(8)
    index.add(np.ascontiguousarray(g))
    d_ref, i_ref = index.search(q.astype(np.float32), 4)
    d, i = S.search(q, g, 4, device="cpu")
    # faiss and torch sum the 8 products in their own order (a few ulp, < 2e-5 here): the indices
    # agree exactly because the data keep consecutive top-5 scores > 1e-3 apart.
    assert _smallest_gap(q.astype(np.float32), g, 4) > 1e-3
    np.testing.assert_array_equal(i, i_ref)
    np.testing.assert_allclose(d, d_ref, atol=1e-6)


def test_torch_path_logic_on_cpu():
    """The CUDA code path (matmul + topk per chunk) run on the CPU tensor backend."""
    rng = np.random.default_rng(3)
    q = rng.integers(-1, 2, (17, 4)).astype(np.float32)
    g = rng.integers(-1, 2, (25, 4)).astype(np.float32)
    scores, idx = S._search_torch(q, g, 6, 5, "cpu", 11)
    _check_topk(q, g, 6, scores, idx)
    full = np.concatenate([c for _, c in S._iter_scores_torch(q, g, 4, "cpu")])
    np.testing.assert_allclose(full, q @ g.T, atol=1e-6)


@pytest.mark.parametrize("chunk", [None, 1, 3, 1000])
def test_iter_scores_covers_the_matrix_in_chunks(chunk):
    rng = np.random.default_rng(4)
    q = rng.standard_normal((10, 6)).astype(np.float32)
    g = rng.standard_normal((9, 6)).astype(np.float32)
    starts, parts = zip(*S.iter_scores(q, g, chunk_size=chunk, device="cpu"), strict=True)
    assert starts[0] == 0
    if chunk:
        assert all(p.shape[0] <= chunk for p in parts)
    np.testing.assert_allclose(np.concatenate(parts), q @ g.T, atol=1e-6)


def test_default_chunk_bounds_the_score_chunk():
    assert S.default_chunk_size(100_000, 256 << 20) == 671
    assert S.default_chunk_size(10**12) == 1
    rng = np.random.default_rng(5)
    q = rng.standard_normal((50, 4)).astype(np.float32)
    g = rng.standard_normal((1000, 4)).astype(np.float32)
    chunks = [c for _, c in S.iter_scores(q, g, chunk_size=S.default_chunk_size(1000, 40_000))]
    assert max(c.nbytes for c in chunks) <= 40_000


def test_pair_scores():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((11, 3)).astype(np.float32)
    b = rng.standard_normal((11, 3)).astype(np.float32)
    np.testing.assert_allclose(S.pair_scores(a, b, chunk_size=4), (a * b).sum(1), atol=1e-6)
    with pytest.raises(ValueError, match="same shape"):
        S.pair_scores(a, b[:3])


def test_argument_errors():
    q = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="dimension mismatch"):
        S.search(q, np.ones((4, 2), np.float32), 1, device="cpu")
    with pytest.raises(ValueError, match="k=5"):
        S.search(q, np.ones((4, 3), np.float32), 5, device="cpu")
    with pytest.raises(ValueError, match="k=0"):
        S.search(q, np.ones((4, 3), np.float32), 0, device="cpu")
    with pytest.raises(ValueError, match="2-D"):
        S.search(np.ones(3), np.ones((4, 3)), 1, device="cpu")
    with pytest.raises(ValueError, match="empty"):
        list(S.iter_scores(q, np.ones((0, 3)), device="cpu"))
    s, i = S.search(np.ones((0, 3)), np.ones((4, 3)), 2, device="cpu")
    assert s.shape == (0, 2) and i.shape == (0, 2)


def test_resolve_device():
    assert S.resolve_device("cpu") == "cpu"
    assert S.resolve_device(None) in ("cpu", "cuda")
    with pytest.raises(UsageError, match="expected 'cpu'"):
        S.resolve_device("tpu")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="CUDA is not available"):
            S.resolve_device("cuda")
        assert S.resolve_device("auto") == "cpu"


@pytest.mark.gpu
def test_cuda_search_matches_cpu_in_fp32():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(7)
    q = rng.standard_normal((3000, 64)).astype(np.float32)
    g = rng.standard_normal((5000, 64)).astype(np.float32)
    before = torch.get_float32_matmul_precision()
    s_gpu, i_gpu = S.search(q, g, 10, device="cuda", chunk_size=1000)
    assert torch.get_float32_matmul_precision() == before
    s_cpu, i_cpu = S.search(q, g, 10, device="cpu")
    np.testing.assert_allclose(s_gpu, s_cpu, atol=1e-4)
    assert (i_gpu[:, 0] == i_cpu[:, 0]).mean() > 0.999
    full = np.concatenate([c for _, c in S.iter_scores(q, g, device="cuda")])
    np.testing.assert_allclose(full, q @ g.T, atol=1e-4)


@pytest.mark.parametrize(("budget", "chunk"), [(None, None), (4 * 64 * 7, None), (4 * 64 * 7, 5)])
def test_search_equals_the_stable_sort_reference_ties_included(budget, chunk):
    """Exact top-k, ties by smaller gallery index, across gallery blocks and query chunks."""
    rng = np.random.default_rng(7)
    q = rng.integers(-1, 2, (37, 4)).astype(np.float32)  # integer products: exact ties
    g = rng.integers(-1, 2, (53, 4)).astype(np.float32)
    g[40:] = g[:13]  # duplicated rows: ties straddle block boundaries
    kw = {"budget_bytes": budget} if budget else {}
    for k in (1, 5, 12, 53):
        s, i = S.search(q, g, k, chunk_size=chunk, device="cpu", **kw)
        # Exact by construction: products and sums of small integers are exact in float32, so
        # torch's blocked matmul and numpy's give the same scores in any order, on any kernel.
        rs, ri = S.topk_reference(q @ g.T, k)
        np.testing.assert_array_equal(i, ri)
        np.testing.assert_array_equal(s, rs)


def test_search_reads_a_memory_mapped_gallery_in_blocks(tmp_path):
    rng = np.random.default_rng(8)
    g = rng.integers(-2, 3, (300, 8)).astype(np.float32)
    q = rng.integers(-2, 3, (20, 8)).astype(np.float32)
    np.save(tmp_path / "g.npy", g)
    mm = np.load(tmp_path / "g.npy", mmap_mode="r")
    s, i = S.search(q, mm, 10, device="cpu", budget_bytes=4 * 64 * 50)  # blocks of 50 rows
    rs, ri = S.topk_reference(q @ g.T, 10)  # integer scores (|s| <= 32): exact on any kernel
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_array_equal(s, rs)


def test_topk_reference_breaks_ties_by_index():
    scores = np.array([[1.0, 2.0, 2.0, 0.5, 2.0]], dtype=np.float32)
    s, i = S.topk_reference(scores, 3)
    assert i.tolist() == [[1, 2, 4]] and s.tolist() == [[2.0, 2.0, 2.0]]


@pytest.mark.gpu
def test_cuda_search_equals_the_reference():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(9)
    q = rng.integers(-1, 2, (500, 16)).astype(np.float32)
    g = rng.integers(-1, 2, (20_000, 16)).astype(np.float32)
    s, i = S.search(q, g, 10, device="cuda")
    rs, ri = S.topk_reference(q @ g.T, 10)  # integer scores: exact on the GPU as on the CPU
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_array_equal(s, rs)
