"""KanjiVG stroke data: locating the installed SVGs and parsing their stroke paths.

KanjiVG (Ulrich Apel, CC BY-SA 3.0, https://kanjivg.tagaini.net) is installed by the ``kanjivg``
wheel as ``kanji/<codepoint>.svg``. Its paths use only the M/m, C/c and S/s commands, so a small
parser turns each stroke into cubic Bezier segments in the 109 x 109 SVG coordinate system.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from pathlib import Path

import numpy as np

from compat.errors import BadInputError, NotFoundError

SVG_SIZE = 109.0
_PATH_RE = re.compile(r'<path[^>]*\sd="([^"]+)"')
_TOKEN_RE = re.compile(r"[MmCcSs]|-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@functools.lru_cache(maxsize=1)
def kanji_dir() -> Path:
    """The folder of SVG files the ``kanjivg`` package installed."""
    try:
        dist = importlib.metadata.distribution("kanjivg")
    except importlib.metadata.PackageNotFoundError:
        raise NotFoundError(
            "the 'kanjivg' package is not installed (pip install kanjivg)"
        ) from None
    return Path(str(dist.locate_file("kanji")))


def kanjivg_version() -> str:
    return importlib.metadata.version("kanjivg")


def list_codepoints() -> list[int]:
    """Base CJK characters (U+4E00-9FFF, no ``-variant`` files), sorted.

    Only file names are read here (instant); stroke counts need a parse, so the generator filters
    on them for the classes it selects.
    """
    out = []
    for path in kanji_dir().glob("*.svg"):
        stem = path.stem
        if "-" in stem:
            continue
        cp = int(stem, 16)
        if 0x4E00 <= cp <= 0x9FFF:
            out.append(cp)
    return sorted(out)


def parse_path(d: str) -> np.ndarray:
    """Parse one SVG path (M/m, C/c, S/s only) into cubic segments of shape (S, 4, 2)."""
    tokens = _TOKEN_RE.findall(d)
    segments: list[np.ndarray] = []
    cur = np.zeros(2)
    last_ctrl: np.ndarray | None = None
    i = 0
    cmd = ""
    while i < len(tokens):
        if tokens[i] in "MmCcSs":
            cmd = tokens[i]
            i += 1
            continue
        if not cmd:
            raise ValueError(f"path data starts with a number: {d[:40]!r}")
        rel = cmd.islower()
        base = cur if rel else np.zeros(2)
        if cmd in "Mm":
            cur = base + np.array([float(tokens[i]), float(tokens[i + 1])])
            i += 2
            last_ctrl = None
            cmd = "l" if rel else "L"  # SVG: further pairs after M are line-tos; KanjiVG has none
        elif cmd in "Cc":
            pts = np.array([float(t) for t in tokens[i : i + 6]]).reshape(3, 2) + base
            segments.append(np.stack([cur, pts[0], pts[1], pts[2]]))
            last_ctrl, cur = pts[1], pts[2]
            i += 6
        elif cmd in "Ss":
            pts = np.array([float(t) for t in tokens[i : i + 4]]).reshape(2, 2) + base
            c1 = 2 * cur - last_ctrl if last_ctrl is not None else cur.copy()
            segments.append(np.stack([cur, c1, pts[0], pts[1]]))
            last_ctrl, cur = pts[0], pts[1]
            i += 4
        else:
            raise ValueError(f"unsupported path command {cmd!r} in {d[:40]!r}")
    if not segments:
        # A stroke that is a single point still gets drawn as a dot.
        segments.append(np.stack([cur, cur, cur, cur]))
    return np.stack(segments)


@functools.lru_cache(maxsize=8192)
def parse_strokes(codepoint: int) -> tuple[np.ndarray, ...]:
    """The strokes of one character, each an array of cubic segments (S, 4, 2) in [0, 109]."""
    path = kanji_dir() / f"{codepoint:05x}.svg"
    if not path.exists():
        raise NotFoundError(f"{path}: no KanjiVG file for U+{codepoint:04X}")
    text = path.read_text(encoding="utf-8")
    try:
        return tuple(parse_path(d) for d in _PATH_RE.findall(text))
    except (ValueError, IndexError) as err:
        raise BadInputError(f"{path}: path data: {err}") from None
