"""Compatibility matrix, update gain and sequence metrics on hand-worked matrices."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compat.compare import matrix as mx

nan = math.nan

# M[query][gallery] for v1, v2, v3 (upper triangle unused).
M3 = np.array(
    [
        [0.5, nan, nan],
        [0.6, 0.7, nan],
        [0.4, 0.8, 0.9],
    ]
)


def test_cells_lower_triangle_and_full_square():
    assert mx.matrix_cells(["v1", "v2", "v3"]) == [
        ("v1", "v1"), ("v2", "v1"), ("v2", "v2"), ("v3", "v1"), ("v3", "v2"), ("v3", "v3")
    ]  # fmt: skip
    assert len(mx.matrix_cells(["v1", "v2", "v3"], full_square=True)) == 9
    assert ("v1", "v2") in mx.matrix_cells(["v1", "v2"], full_square=True)


def test_as_array_places_values_by_query_and_gallery():
    a = mx.as_array({("v2", "v1"): 0.6, ("v1", "v1"): 0.5, ("x", "v1"): 1.0}, ["v1", "v2"])
    assert a[1, 0] == 0.6 and a[0, 0] == 0.5 and np.isnan(a[0, 1]) and np.isnan(a[1, 1])


def test_sequence_metrics_by_hand():
    # Pairs j < i: (2,1) 0.6 > 0.5 yes; (3,1) 0.4 > 0.5 no; (3,2) 0.8 > 0.7 yes -> 2/3.
    assert mx.ac(M3) == pytest.approx(2 / 3)
    # AA: (0.5 + 0.6 + 0.7 + 0.4 + 0.8 + 0.9) / 6
    assert mx.aa(M3) == pytest.approx(3.9 / 6)
    # BC: mean(M[3][1] - M[1][1], M[3][2] - M[2][2]) = mean(-0.1, 0.1)
    assert mx.bc(M3) == pytest.approx(0.0)
    # FC: mean(M[2][1] - M[2][2], M[3][2] - M[3][3]) = mean(-0.1, -0.1)
    assert mx.fc(M3) == pytest.approx(-0.1)
    assert mx.sequence_metrics(M3) == pytest.approx(
        {"ac": 2 / 3, "aa": 0.65, "bc": 0.0, "fc": -0.1}
    )


def test_ac_strictness_decides_ties():
    tie = np.array([[0.5, nan], [0.5, 0.6]])
    assert mx.ac(tie, strict=True) == 0.0  # reference code: <= is a violation
    assert mx.ac(tie, strict=False) == 1.0  # CL2R: only < is a violation


def test_aa_keeps_true_zeros():
    m = np.array([[0.0, nan], [0.0, 0.6]])
    assert mx.aa(m) == pytest.approx(0.6 / 3)  # not 0.6 (mean of the non-zero entries)


def test_missing_cells_are_never_silently_dropped():
    m = M3.copy()
    m[2, 0] = nan
    assert math.isnan(mx.ac(m)) and math.isnan(mx.aa(m)) and math.isnan(mx.bc(m))
    assert mx.fc(m) == pytest.approx(-0.1)  # FC does not read M[3][1]
    one = np.array([[0.7]])
    assert math.isnan(mx.ac(one)) and mx.aa(one) == 0.7 and math.isnan(mx.bc(one))
    with pytest.raises(ValueError, match="square"):
        mx.ac(np.ones((2, 3)))


def test_update_gain_by_hand():
    # docs/findings.md prototype: old/old 61.1, bct/old 67.5, paragon (independent/independent) 75.0
    g = mx.update_gain(0.675, 0.611, 0.750)
    assert g.value == pytest.approx((0.675 - 0.611) / (0.750 - 0.611))  # 0.4604...
    assert g.meaningful and g.reason == "criterion holds"
    failed = mx.update_gain(0.002, 0.611, 0.750)  # independent/old: criterion fails
    assert failed.value == pytest.approx((0.002 - 0.611) / 0.139) and not failed.meaningful
    for bad_paragon in (0.611, 0.5):  # denominator 0 or negative
        g = mx.update_gain(0.7, 0.611, bad_paragon)
        assert g.value is None and not g.meaningful and "denominator" in g.reason
    assert mx.update_gain(nan, 0.6, 0.7).value is None
    assert mx.update_gain(0.7, 0.6, 0.8).to_json() == {
        "value": pytest.approx(0.5), "meaningful": True, "reason": "criterion holds"
    }  # fmt: skip


def test_gain_samples_are_nan_where_undefined():
    out = mx.gain_samples(
        np.array([0.7, 0.7, 0.7]), np.array([0.6, 0.6, 0.6]), np.array([0.8, 0.6, 0.5])
    )
    assert out[0] == pytest.approx(0.5) and np.isnan(out[1]) and np.isnan(out[2])
