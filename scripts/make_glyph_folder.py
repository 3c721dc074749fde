"""Render a real image folder of printed characters: one class per character, one PNG per image.

Issue 42 item 2 asks for "a real-image folder of your own making where no configuration can beat
keeping v1": the promotion gate must refuse every served configuration of a model trained
elsewhere on it (query adapters, query blend, psi backfill) and say which came closest. There is
no dataset to download, so this script makes one, the same on every machine with the locked
matplotlib, Pillow and fontTools and the same Python (whose ``unicodedata`` version picks the
character categories): printed characters rendered from the TrueType fonts that ship inside
matplotlib (``matplotlib/mpl-data/fonts/ttf``), never from the system's fonts (they differ by
machine).

- **Fonts** (:data:`FONTS`): DejaVu Sans, Serif and Sans Mono, each regular, bold, oblique and
  bold oblique, and STIX General in the same four styles: 16 fonts. matplotlib's Computer Modern
  fonts (``cm*.ttf``) are left out: they cover about 130 characters in TeX's own encodings, and
  every class must be printed in every font.
- **Classes**: the characters every font maps to a real glyph (fontTools' cmap, not
  ``.notdef``), letters, digits, punctuation and symbols (Unicode categories L, N, P and S; not
  modifier letters or symbols, ``Lm``/``Sk``, nor the caseless ``Lo`` letters, click letters
  that print as ``!`` and ``|``), whose clean rendering has ink and fits the image in every font.
  Look-alikes are one class: a character whose clean renderings differ from an earlier
  (lower code point) character's by less than :data:`SAME_GLYPH` (the median over the fonts of
  the pixels that differ, relative to their ink) is dropped, so Latin ``A``, Greek ``Α`` and
  Cyrillic ``А`` are the one class ``U+0041``; accented letters stay classes of their own. Of
  what remains, ``--classes`` are drawn with ``--seed``.
- **Images**: image ``i`` of a class is printed in font ``(i + k) % 16`` (``k``: the class's
  position), at 4x the output size, with a seeded random jitter: rotation within +-10 degrees,
  scale 0.8 to 1.1, shift within +-10% of the image, strokes thickened by 0 to 2 px at 4x
  (thinning erased STIX's hairlines), then box-downsampled to ``--size`` (anti-aliasing), blurred by a Gaussian of radius
  0 to 0.7 px and given pixel noise (std 4% of 255, as the embedded data's default). Ink is
  bright on a dark ground, the embedded kanji's convention (``compat/data/render.py``): 8-bit
  grayscale PNG. One RNG per image, seeded by (seed, code point, image), as the embedded
  renderer's.

Output: ``OUT/U+XXXX/NNN.png`` (a data source ``data: {kind: folder, root: OUT}`` reads one
sub-folder per class) and ``OUT/glyphs.json`` (the fonts, versions and each class's character
and Unicode name, and the Unicode version that chose them; a folder source reads only the
sub-folders). The folder is built beside OUT
and swapped in whole (``compat.outputs.new_folder``); an existing non-empty OUT is refused (exit
2) unless ``--force``. The same arguments give the same bytes.

Usage: ``python scripts/make_glyph_folder.py --out DIR [--classes 600] [--per-class 20]
[--seed 0] [--size 32] [--force]``; experiments/glyphs runs it as its first stage.
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from functools import cache
from pathlib import Path

import numpy as np

FONTS = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSans-BoldOblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSerif-BoldItalic.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSansMono-Oblique.ttf",
    "DejaVuSansMono-BoldOblique.ttf",
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
    "STIXGeneralBolIta.ttf",
)
SCALE = 4  # drawn at 4x the output size, box-downsampled
EM = 0.62  # the font's em as a share of the image at scale 1
MARGIN = 0.05  # a clean rendering must keep this share of the image free on every side
SAME_GLYPH = 0.04  # look-alikes: median over fonts of |a - b| / mean ink below this
CATEGORIES = ("L", "N", "P", "S")
SKIP_CATEGORIES = ("Lm", "Sk", "Lo")
ROTATION = 10.0  # degrees, uniform +-
SCALES = (0.8, 1.1)  # uniform
SHIFT = 0.1  # share of the image, uniform +-
BLUR = 0.7  # Gaussian radius at the output size, uniform 0..
NOISE = 0.04  # pixel noise std, share of 255


def font_dir() -> Path:
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


@cache
def _font(name: str, size: int):
    from PIL import ImageFont

    # BASIC layout: one character needs no shaping, and Raqm (where installed) is not on
    # every machine.
    return ImageFont.truetype(str(font_dir() / name), size, layout_engine=ImageFont.Layout.BASIC)


def _covered() -> list[int]:
    """Code points every font of FONTS maps to a real glyph, of the kept categories."""
    from fontTools.ttLib import TTFont

    common: set[int] | None = None
    for name in FONTS:
        cmap = TTFont(str(font_dir() / name), lazy=True).getBestCmap() or {}
        real = {cp for cp, glyph in cmap.items() if glyph != ".notdef"}
        common = real if common is None else common & real
    out = []
    for cp in sorted(common or ()):
        category = unicodedata.category(chr(cp))
        if category[0] in CATEGORIES and category not in SKIP_CATEGORIES:
            out.append(cp)
    return out


def _draw(cp: int, font: str, size: int, scale: float = 1.0, stroke: int = 0):
    """The character drawn white on black at SCALE x ``size``, centred (middle of its advance
    and of the font's ascender to descender), its em EM x ``scale`` of the image."""
    from PIL import Image, ImageDraw

    canvas = size * SCALE
    img = Image.new("L", (canvas, canvas), 0)
    f = _font(font, max(1, round(EM * scale * canvas)))
    ImageDraw.Draw(img).text(
        (canvas / 2, canvas / 2),
        chr(cp),
        fill=255,
        font=f,
        anchor="mm",
        stroke_width=stroke,
        stroke_fill=255,
    )
    return img


def select_classes(count: int, seed: int, size: int = 32) -> list[int]:
    """``count`` code points (ascending), drawn with ``seed`` from the distinct printable ones."""
    from PIL import Image

    canvas = size * SCALE
    lo, hi = MARGIN * canvas, (1 - MARGIN) * canvas
    candidates = _covered()
    kept: list[int] = []
    # (fonts, size * size) clean renderings per kept code point, filled in order
    renders = np.empty((len(candidates), len(FONTS), size * size), np.float32)
    inks = np.empty((len(candidates), len(FONTS)), np.float32)
    for cp in candidates:
        rows = []
        for font in FONTS:
            img = _draw(cp, font, size)
            box = img.getbbox()
            if box is None or box[0] < lo or box[1] < lo or box[2] > hi or box[3] > hi:
                break  # blank, or cut off by the image's edge, in this font
            small = img.resize((size, size), Image.Resampling.BOX)
            rows.append(np.asarray(small, dtype=np.float32).ravel() / 255)
        else:
            this = np.stack(rows)
            this_ink = this.sum(-1)
            ink = 0.5 * (inks[: len(kept)] + this_ink)
            # |a - b| summed is at least the difference of the inks: only the kept characters
            # that bound lets through are compared pixel by pixel
            near = np.flatnonzero(
                np.median(np.abs(inks[: len(kept)] - this_ink) / ink, axis=1) < SAME_GLYPH
            )
            if len(near):
                diff = np.abs(renders[near] - this).sum(-1)
                if np.median(diff / ink[near], axis=1).min() < SAME_GLYPH:
                    continue  # a look-alike of an earlier class
            renders[len(kept)] = this
            inks[len(kept)] = this_ink
            kept.append(cp)
    if count > len(kept):
        raise ValueError(f"--classes {count}: the fonts print only {len(kept)} distinct characters")
    rng = np.random.default_rng([seed, 0x676C79])
    return sorted(int(kept[i]) for i in rng.choice(len(kept), size=count, replace=False))


def render_image(cp: int, font: str, rng: np.random.Generator, size: int = 32) -> np.ndarray:
    """One jittered instance: uint8 (size, size), ink bright on dark."""
    from PIL import Image, ImageFilter

    canvas = size * SCALE
    angle = rng.uniform(-ROTATION, ROTATION)
    scale = rng.uniform(*SCALES)
    dx, dy = rng.uniform(-SHIFT, SHIFT, size=2) * canvas
    stroke = int(rng.integers(0, 3))  # thickened by 0, 1 or 2 px at SCALE x
    blur = rng.uniform(0, BLUR)
    img = _draw(cp, font, size, scale, stroke)
    img = img.rotate(
        angle,
        resample=Image.Resampling.BILINEAR,
        translate=(round(dx), round(dy)),
        fillcolor=0,
    )
    img = img.resize((size, size), Image.Resampling.BOX)
    if blur > 0:
        img = img.filter(ImageFilter.GaussianBlur(blur))
    arr = np.asarray(img, dtype=np.float32) + rng.normal(0, NOISE * 255, size=(size, size))
    return np.clip(np.rint(arr), 0, 255).astype(np.uint8)


def class_name(cp: int) -> str:
    return f"U+{cp:04X}"


def make_folder(out: Path, classes: int, per_class: int, seed: int, size: int) -> dict:
    """Render the folder into ``out`` (built beside it, swapped in whole); returns its index."""
    import io

    import fontTools
    import matplotlib
    import PIL
    from PIL import Image, features

    from compat.outputs import new_folder

    codepoints = select_classes(classes, seed, size)
    index = {
        "made_by": "scripts/make_glyph_folder.py",
        "classes": classes,
        "per_class": per_class,
        "seed": seed,
        "size": size,
        "fonts": list(FONTS),
        "matplotlib": matplotlib.__version__,
        "pillow": PIL.__version__,
        "freetype": features.version("freetype2"),
        "fonttools": fontTools.version,
        "unicodedata": unicodedata.unidata_version,  # picks the characters' categories
        "characters": {
            class_name(cp): [chr(cp), unicodedata.name(chr(cp), "")] for cp in codepoints
        },
    }
    with new_folder(out) as tmp:
        for k, cp in enumerate(codepoints):
            folder = tmp / class_name(cp)
            folder.mkdir()
            for i in range(per_class):
                rng = np.random.default_rng([seed, cp, i])
                font = FONTS[(i + k) % len(FONTS)]
                buf = io.BytesIO()
                Image.fromarray(render_image(cp, font, rng, size), "L").save(buf, "PNG")
                (folder / f"{i:03d}.png").write_bytes(buf.getvalue())
        text = json.dumps(index, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        (tmp / "glyphs.json").write_text(text, encoding="utf-8")
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Issue 42 item 2: a real-image folder for experiments/glyphs.",
    )
    parser.add_argument("--out", required=True, type=Path, help="the folder to write")
    parser.add_argument("--classes", type=int, default=600, help="characters (default 600)")
    parser.add_argument(
        "--per-class", type=int, default=20, help="images per character (default 20)"
    )
    parser.add_argument("--seed", type=int, default=0, help="classes and jitter (default 0)")
    parser.add_argument("--size", type=int, default=32, help="image side in px (default 32)")
    parser.add_argument("--force", action="store_true", help="replace a non-empty --out")
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"make_glyph_folder: {message}", file=sys.stderr)
        return 2

    if args.classes < 2 or args.per_class < 2:
        return fail("--classes and --per-class: at least 2")
    if not 8 <= args.size <= 112:
        return fail("--size: 8 to 112 (the data sources' range)")
    if not 0 <= args.seed < 2**32:
        return fail("--seed: 0 .. 2**32 - 1")
    out: Path = args.out
    if out.exists() and not out.is_dir():
        return fail(f"--out {out}: a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not args.force:
        return fail(f"--out {out}: not empty; remove it or pass --force to replace it")
    from compat.errors import CompatError

    try:
        make_folder(out, args.classes, args.per_class, args.seed, args.size)
    except ValueError as err:
        return fail(str(err))
    except CompatError as err:
        print(f"make_glyph_folder: {err}", file=sys.stderr)
        return err.exit_code
    print(
        f"{out}: {args.classes} classes x {args.per_class} images of {args.size}x{args.size} "
        f"(seed {args.seed}, {len(FONTS)} fonts)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
