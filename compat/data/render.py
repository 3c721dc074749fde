"""Render a KanjiVG character as one "handwritten" instance.

Each instance draws the character's strokes with its own random variation, so that instances of
a class look like different people's handwriting: control-point jitter, a per-stroke affine
(rotation, scale, shift), a sinusoidal wobble along the stroke, an occasional dropped stroke, a
random stroke width, a global affine (rotation, shear, anisotropic scale, shift) and pixel noise.
Strokes are drawn with Pillow at twice the output size and box-downsampled (anti-aliasing).

One RNG per image, seeded by (seed, codepoint, instance), makes the output independent of order
and of how the work is split across processes.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw
from pydantic import BaseModel, ConfigDict, Field

from compat.data.kanji import SVG_SIZE

_T = np.linspace(0.0, 1.0, 7)
# Bernstein basis of a cubic Bezier at the sample points: points = B @ control_points.
_BERNSTEIN = np.stack([(1 - _T) ** 3, 3 * (1 - _T) ** 2 * _T, 3 * (1 - _T) * _T**2, _T**3], axis=1)


class Distortion(BaseModel):
    """How strongly instances of a class differ. ``strength`` scales every geometric term."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    strength: float = Field(1.0, ge=0.0, le=3.0)
    jitter: float = Field(2.5, ge=0.0, description="control-point jitter, SVG units (of 109)")
    stroke_rotation: float = Field(0.12, ge=0.0, description="per-stroke rotation, radians (std)")
    stroke_scale: float = Field(0.12, ge=0.0, description="per-stroke scale change (std)")
    stroke_shift: float = Field(3.5, ge=0.0, description="per-stroke shift, SVG units (std)")
    wobble: float = Field(1.8, ge=0.0, description="sinusoidal wobble amplitude, SVG units")
    drop_stroke: float = Field(0.1, ge=0.0, le=1.0, description="chance of dropping one stroke")
    rotation: float = Field(0.15, ge=0.0, description="global rotation, radians (std)")
    shear: float = Field(0.15, ge=0.0, description="global shear (std)")
    scale: float = Field(0.1, ge=0.0, description="global log-scale (std)")
    shift: float = Field(0.06, ge=0.0, description="global shift, fraction of the image (std)")
    width_min: float = Field(2.5, gt=0.0, description="stroke width, SVG units")
    width_max: float = Field(5.0, gt=0.0)
    noise: float = Field(0.04, ge=0.0, description="pixel noise std, fraction of 255")


def _rotation(theta: float) -> np.ndarray:
    c, s = np.cos(theta), np.sin(theta)
    return np.array([[c, -s], [s, c]])


def render_glyph(
    strokes: tuple[np.ndarray, ...],
    rng: np.random.Generator,
    size: int = 32,
    channels: int = 1,
    distortion: Distortion | None = None,
) -> np.ndarray:
    """Render one instance of a character: uint8 array (size, size, channels), ink bright on dark."""
    d = distortion or Distortion()
    k = d.strength
    center = np.array([SVG_SIZE / 2, SVG_SIZE / 2])
    n = len(strokes)
    keep = np.ones(n, dtype=bool)
    if n > 1 and rng.random() < d.drop_stroke:
        keep[rng.integers(n)] = False

    # Global affine in SVG units around the centre: rotation @ shear @ anisotropic scale.
    shear = np.array([[1.0, rng.normal(0, d.shear * k)], [0.0, 1.0]])
    scale = np.diag(np.exp(rng.normal(0, d.scale * k, size=2)))
    glob = _rotation(rng.normal(0, d.rotation * k)) @ shear @ scale
    glob_shift = rng.normal(0, d.shift * k, size=2) * SVG_SIZE

    # Per-stroke random terms, drawn in one go for every stroke (dropped or not), so the random
    # stream does not depend on which stroke is dropped; vectorised because Python overhead per
    # stroke dominated the render time.
    seg_counts = np.array([len(c) for c in strokes])
    ctrl = np.concatenate(strokes)  # (S, 4, 2) over all strokes
    jit = rng.normal(0, d.jitter * k, size=ctrl.shape)
    theta = rng.normal(0, d.stroke_rotation * k, size=n)
    zoom = np.exp(rng.normal(0, d.stroke_scale * k, size=n))
    shift = rng.normal(0, d.stroke_shift * k, size=(n, 2))
    amp = rng.normal(0, d.wobble * k, size=n)
    freq = rng.uniform(0.5, 2.0, size=n)
    phase = rng.uniform(0, 6.3, size=n)

    per = len(_T)
    pts = np.einsum("tk,skd->std", _BERNSTEIN, ctrl + jit)  # (S, per, 2)
    stroke_of = np.repeat(np.arange(n), seg_counts * per)
    pts = pts.reshape(-1, 2)
    starts = np.concatenate([[0], np.cumsum(seg_counts * per)])
    mids = np.add.reduceat(pts, starts[:-1], axis=0) / (seg_counts * per)[:, None]
    c, s_ = np.cos(theta) * zoom, np.sin(theta) * zoom
    rel = pts - mids[stroke_of]
    rx = c[stroke_of] * rel[:, 0] - s_[stroke_of] * rel[:, 1]
    ry = s_[stroke_of] * rel[:, 0] + c[stroke_of] * rel[:, 1]
    pts = np.stack([rx, ry], axis=1) + mids[stroke_of] + shift[stroke_of]
    # Wobble perpendicular to each stroke's overall direction.
    direction = pts[starts[1:] - 1] - pts[starts[:-1]]
    normal = np.stack([-direction[:, 1], direction[:, 0]], axis=1)
    normal /= np.linalg.norm(normal, axis=1, keepdims=True) + 1e-6
    along = (np.arange(len(pts)) - starts[stroke_of]) / np.maximum(seg_counts * per - 1, 1)[
        stroke_of
    ]
    wave = amp[stroke_of] * np.sin(2 * np.pi * freq[stroke_of] * along + phase[stroke_of])
    pts = pts + wave[:, None] * normal[stroke_of]
    draw_size = 2 * size
    px = draw_size / SVG_SIZE
    pts = ((pts - center) @ glob.T + center + glob_shift) * px

    width = max(1, round(rng.uniform(d.width_min, d.width_max) * px))
    r = width / 2
    img = Image.new("L", (draw_size, draw_size), 0)
    draw = ImageDraw.Draw(img)
    for i in np.flatnonzero(keep):
        xy = pts[starts[i] : starts[i + 1]].ravel().tolist()
        draw.line(xy, fill=255, width=width, joint="curve")
        for x, y in ((xy[0], xy[1]), (xy[-2], xy[-1])):
            draw.ellipse((x - r, y - r, x + r, y + r), fill=255)
    arr = np.asarray(img.resize((size, size), Image.Resampling.BOX), dtype=np.float32)
    if d.noise > 0:
        arr = arr + rng.normal(0, d.noise * 255, size=arr.shape)
    out = np.clip(arr, 0, 255).astype(np.uint8)[:, :, None]
    return np.repeat(out, channels, axis=2) if channels > 1 else out
