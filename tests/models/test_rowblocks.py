"""compat.models.rowblocks: a row-wise map over fixed row blocks gives every row the same bits
however the rows are batched (docs/findings.md, "Determinism")."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from compat.models.rowblocks import aligned_zeros, map_rows

rng = np.random.default_rng(0)
W = torch.from_numpy(rng.standard_normal((24, 40)).astype(np.float32))
X = rng.standard_normal((61, 24)).astype(np.float32)


def _matmul(rows: np.ndarray) -> np.ndarray:
    return (torch.from_numpy(rows) @ W).numpy()


def test_a_hand_computed_map_and_its_block_calls():
    seen = []

    def double(rows):
        seen.append(rows.copy())
        return rows * 2

    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    out = map_rows(double, x, start=3, out_dim=2, block=4)
    np.testing.assert_array_equal(out, x * 2)
    # rows 3..7 of the gallery: block 0 holds row 3 at position 3, block 1 rows 4..7
    assert [b.shape for b in seen] == [(4, 2), (4, 2)]
    np.testing.assert_array_equal(seen[0], [[0, 0], [0, 0], [0, 0], [0, 1]])
    np.testing.assert_array_equal(seen[1], x[1:])


@settings(max_examples=40, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 60), max_size=8, unique=True),
    block=st.sampled_from([1, 4, 8, 16, 64]),
)
def test_any_batching_gives_the_bits_of_one_call(cuts, block):
    whole = map_rows(_matmul, X, out_dim=40, block=block)
    edges = [0, *sorted(cuts), len(X)]
    pieces = [
        map_rows(_matmul, X[a:b], start=a, out_dim=40, block=block)
        for a, b in itertools.pairwise(edges)
        if b > a
    ]
    np.testing.assert_array_equal(np.concatenate(pieces), whole)
    # and it is the matrix product (to float32 rounding of a 24-term sum)
    np.testing.assert_allclose(whole, X @ W.numpy(), rtol=1e-5, atol=1e-5)


def test_an_empty_input_and_bad_arguments():
    assert map_rows(_matmul, X[:0], out_dim=40).shape == (0, 40)
    with pytest.raises(ValueError, match="start"):
        map_rows(_matmul, X, start=-1, out_dim=40)
    with pytest.raises(ValueError, match="expected"):
        map_rows(lambda r: r[:1], X, out_dim=24, block=8)


def test_the_block_buffer_is_aligned_and_zero():
    for rows, cols in [(1, 1), (3, 5), (256, 128)]:
        a = aligned_zeros(rows, cols)
        assert a.ctypes.data % 64 == 0 and a.shape == (rows, cols) and not a.any()
        assert a.dtype == np.float32 and a.flags.c_contiguous
