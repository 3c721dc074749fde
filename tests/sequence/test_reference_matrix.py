"""compat's AC and AA reproduce the d-Simplex/HOC reference evaluation's published ER matrix.

The reference code's released evaluation of the ER baseline, 7 tasks (CIFAR-100 training,
CIFAR-10 queries against a template gallery, top-1) prints this matrix with AC = 0.00 and
AA = 35.18 (%). Its AA skips zero cells (the upper triangle it never fills); the lower triangle
has none, so that equals compat's mean of the lower triangle.
"""

from __future__ import annotations

import numpy as np
import pytest

from compat.compare import matrix as mx

ER_7_TASKS = np.array(
    [
        [0.6342, 0, 0, 0, 0, 0, 0],
        [0.61556, 0.63092, 0, 0, 0, 0, 0],
        [0.11708, 0.1123, 0.72734, 0, 0, 0, 0],
        [0.1143, 0.1053, 0.69232, 0.703, 0, 0, 0],
        [0.0908, 0.07756, 0.09296, 0.08552, 0.74464, 0, 0],
        [0.08512, 0.07364, 0.10338, 0.09524, 0.7226, 0.72312, 0],
        [0.09718, 0.08578, 0.0975, 0.09748, 0.70352, 0.7063, 0.71544],
    ]
)


def test_ac_and_aa_of_the_reference_er_matrix():
    assert mx.ac(ER_7_TASKS, strict=True) == 0.0
    assert round(100 * mx.aa(ER_7_TASKS), 2) == 35.18
    assert 100 * mx.aa(ER_7_TASKS) == pytest.approx(35.179, abs=5e-4)  # as the reference prints
    # Not vacuous: the non-strict reading still fails every pair (no cross test ties its self).
    assert mx.ac(ER_7_TASKS, strict=False) == 0.0
    better = ER_7_TASKS.copy()
    better[1, 0] = 0.64  # one cross test above the first self test: 1 of 21 pairs
    assert mx.ac(better) == pytest.approx(1 / 21)
