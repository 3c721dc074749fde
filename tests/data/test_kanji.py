import numpy as np
import pytest

from compat.data.kanji import list_codepoints, parse_path, parse_strokes


def test_parse_path_absolute_and_relative_cubics():
    # M 10,10 c 1,0 2,0 3,0 -> cubic from (10,10) with relative controls (11,10) (12,10) (13,10)
    # s 2,1 3,1 -> smooth: first control reflects (12,10) about (13,10) = (14,10); then (15,11) (16,11)
    seg = parse_path("M10,10c1,0,2,0,3,0s2,1,3,1")
    assert seg.shape == (2, 4, 2)
    np.testing.assert_allclose(seg[0], [[10, 10], [11, 10], [12, 10], [13, 10]])
    np.testing.assert_allclose(seg[1], [[13, 10], [14, 10], [15, 11], [16, 11]])


def test_parse_path_absolute_smooth_without_previous_control():
    # S with no preceding C: the first control point is the current point.
    seg = parse_path("M1,2S3,4,5,6")
    np.testing.assert_allclose(seg[0], [[1, 2], [1, 2], [3, 4], [5, 6]])


def test_parse_path_negative_numbers_without_separators():
    seg = parse_path("M47.04,13.67c0.09,0.26-0.67,1.66-1.15,1.94")
    np.testing.assert_allclose(seg[0, 3], [47.04 - 1.15, 13.67 + 1.94])


def test_parse_path_rejects_unknown_commands():
    with pytest.raises(ValueError):
        parse_path("M1,1L2,2")


def test_installed_kanjivg_has_thousands_of_base_characters():
    cps = list_codepoints()
    assert len(cps) > 6000
    assert all(0x4E00 <= c <= 0x9FFF for c in cps)
    assert cps == sorted(cps)


def test_parse_strokes_of_ichi_is_one_horizontal_stroke():
    strokes = parse_strokes(0x4E00)  # 一
    assert len(strokes) == 1
    pts = strokes[0].reshape(-1, 2)
    assert np.ptp(pts[:, 0]) > 5 * np.ptp(pts[:, 1])
