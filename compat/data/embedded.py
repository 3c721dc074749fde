"""The embedded default dataset: handwritten-looking kanji rendered offline from KanjiVG.

Classes are characters chosen by a seeded shuffle of the installed KanjiVG base characters
(CJK, at most ``max_strokes`` strokes); each class gets ``images_per_class`` instances rendered by
``compat.data.render``. The result is cached under a fingerprint of the generator params and the
package versions that shape the pixels, so a second run does not render again.
"""

from __future__ import annotations

import importlib.metadata
import logging
import multiprocessing as mp
import os
from pathlib import Path

import numpy as np

from compat.data.kanji import kanjivg_version, list_codepoints, parse_strokes
from compat.data.render import Distortion, render_glyph
from compat.errors import BadInputError, StorageError
from compat.io import atomic_path, fingerprint

log = logging.getLogger(__name__)

# Bump when the renderer changes what it draws: it is part of every embedded fingerprint.
GENERATOR_VERSION = 2


def select_codepoints(classes: int, seed: int, max_strokes: int) -> list[int]:
    """A seeded, order-independent choice of ``classes`` characters with <= max_strokes strokes."""
    pool = list_codepoints()
    order = np.random.default_rng([seed, 0x4B41]).permutation(len(pool))
    chosen = []
    for i in order:
        cp = pool[i]
        if 0 < len(parse_strokes(cp)) <= max_strokes:
            chosen.append(cp)
            if len(chosen) == classes:
                return sorted(chosen)
    raise BadInputError(
        f"data.classes: {classes} asked for, but only {len(chosen)} KanjiVG characters have "
        f"<= {max_strokes} strokes (data.max_strokes)"
    )


def embedded_fingerprint(params: dict) -> str:
    versions = {
        "generator": GENERATOR_VERSION,
        "kanjivg": kanjivg_version(),
        "numpy": np.__version__,
        "pillow": importlib.metadata.version("pillow"),
    }
    return fingerprint({"params": params, "versions": versions})


def _render_class(args: tuple[int, int, int, int, int, dict]) -> np.ndarray:
    cp, n, seed, size, channels, distortion = args
    strokes = parse_strokes(cp)
    dist = Distortion(**distortion)
    return np.stack(
        [
            render_glyph(strokes, np.random.default_rng([seed, cp, i]), size, channels, dist)
            for i in range(n)
        ]
    )


def render_dataset(
    codepoints: list[int],
    images_per_class: int,
    seed: int,
    size: int,
    channels: int,
    distortion: Distortion,
    workers: int | None = None,
) -> np.ndarray:
    """Render every class; returns uint8 (len(codepoints) * images_per_class, size, size, channels)."""
    jobs = [
        (cp, images_per_class, seed, size, channels, distortion.model_dump()) for cp in codepoints
    ]
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(jobs) < 2 * workers:
        blocks = [_render_class(j) for j in jobs]
    else:
        with mp.get_context("spawn").Pool(workers) as pool:
            blocks = pool.map(_render_class, jobs, chunksize=max(1, len(jobs) // (8 * workers)))
    return np.concatenate(blocks)


def _read_cached(path: Path, shape: tuple[int, ...] | None) -> np.ndarray | None:
    """The cached array, or None (with a warning) when the entry cannot be trusted: truncated,
    not an array file, or not the uint8 ``shape`` the params ask for."""
    try:
        images = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        log.warning("warning: %s: unreadable render cache entry (%s); rendering again", path, err)
        return None
    if images.dtype != np.uint8 or (shape is not None and images.shape != shape):
        log.warning(
            "warning: %s: render cache entry holds %s %s, expected uint8 %s; rendering again",
            path,
            images.dtype,
            images.shape,
            shape,
        )
        return None
    return images


def cached_render(
    cache_dir: Path,
    key: str,
    render: callable,  # type: ignore[valid-type]
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """Load the array cached under ``key`` or render, save and return it.

    A damaged entry (a truncated file, e.g. a disk that filled up, or one of the wrong
    ``shape``) is not an error: it is discarded with a warning and rendered again.
    """
    path = cache_dir / f"glyphs-{key}.npy"
    if path.exists():
        images = _read_cached(path, shape)
        if images is not None:
            return images
    images = render()
    try:
        with atomic_path(path, size=images.nbytes + 128) as tmp, open(tmp, "wb") as f:
            np.save(f, images, allow_pickle=False)
    except StorageError as err:  # a full disk: the stage goes on without the cache
        log.warning("warning: %s", err)
    except OSError as err:  # a cache is an optimisation: the stage goes on without it
        log.warning("warning: %s: cannot write the render cache (%s)", path, err.strerror or err)
    return images
