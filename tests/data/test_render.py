import numpy as np
import pytest

from compat.data.kanji import parse_strokes
from compat.data.render import Distortion, render_glyph

EI = parse_strokes(0x6C38)  # 永, 5 strokes


def _rng(i: int) -> np.random.Generator:
    return np.random.default_rng([0, 0x6C38, i])


def test_same_seed_same_pixels():
    a = render_glyph(EI, _rng(3), 32)
    b = render_glyph(EI, _rng(3), 32)
    assert a.dtype == np.uint8 and a.shape == (32, 32, 1)
    assert np.array_equal(a, b)


def test_instances_differ_but_stay_close_to_the_clean_glyph():
    clean = render_glyph(EI, _rng(0), 32, distortion=Distortion(strength=0, noise=0)).astype(float)
    inst = [
        render_glyph(EI, _rng(i), 32, distortion=Distortion(noise=0)).astype(float)
        for i in range(6)
    ]
    other = render_glyph(parse_strokes(0x4E00), _rng(0), 32, distortion=Distortion(noise=0)).astype(
        float
    )
    assert all(not np.array_equal(inst[0], x) for x in inst[1:])

    def corr(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])

    same = np.mean([corr(clean, x) for x in inst])
    assert same > corr(clean, other)


@pytest.mark.parametrize(("size", "channels"), [(16, 1), (112, 3)])
def test_size_and_channels(size: int, channels: int):
    img = render_glyph(EI, _rng(0), size, channels)
    assert img.shape == (size, size, channels)
    if channels == 3:
        assert np.array_equal(img[..., 0], img[..., 2])
    assert img.max() > 100  # ink is drawn


def test_zero_distortion_is_deterministic_regardless_of_rng():
    d = Distortion(strength=0, noise=0, drop_stroke=0, width_min=3, width_max=3)
    assert np.array_equal(
        render_glyph(EI, _rng(1), 32, distortion=d), render_glyph(EI, _rng(2), 32, distortion=d)
    )
