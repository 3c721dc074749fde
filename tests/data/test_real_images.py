"""Photographs as a user would bring them, through the folder and manifest sources.

Every file here is made with Pillow: photo-like RGB (a gradient under noise, so resizing
matters) in JPEG, PNG, WebP, BMP, TIFF and GIF; greyscale; CMYK JPEG; EXIF-rotated photos
(orientations 3, 6 and 8, as phones store them); RGBA and palette images with transparency;
a 16-bit greyscale PNG; tiny (5 x 7) and large (3000 x 2000) images; non-square images. The
README section "Your own images" states the rules these tests hold the decoder to.
"""

from pathlib import Path

import numpy as np
import pytest
from PIL import Image, features

from compat.data.config import FolderData, ManifestData
from compat.data.sources import build_source, read_image

SIZE = 32
EXTS = [".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif"]


def _photo(width: int, height: int, seed: int) -> np.ndarray:
    """Photo-like uint8 (height, width, 3): colour gradients, a bright disc, sensor noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = 255 * x / max(width - 1, 1)
    g = 255 * y / max(height - 1, 1)
    b = 128 + 100 * np.sin(x / max(width, 1) * 6.0)
    disc = ((x - 0.6 * width) ** 2 + (y - 0.4 * height) ** 2) < (0.2 * min(width, height)) ** 2
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 12, (height, width, 3))
    img[disc] = 240
    return img.clip(0, 255).astype(np.uint8)


def _upright() -> Image.Image:
    """A 60 x 40 image no rotation or mirror maps onto itself: a red top-left block."""
    arr = np.full((40, 60, 3), 230, np.uint8)
    arr[:15, :20] = (200, 20, 20)
    arr[25:, 40:] = (20, 20, 200)
    return Image.fromarray(arr)


# EXIF orientation -> the transpose that makes the stored pixels from the upright image
# (exif_transpose undoes it when reading).
STORED = {
    3: Image.Transpose.ROTATE_180,
    6: Image.Transpose.ROTATE_90,  # shown after a 90 degree clockwise turn
    8: Image.Transpose.ROTATE_270,
}


def _save_rotated(path: Path, orientation: int, **kw) -> None:
    stored = _upright().transpose(STORED[orientation])
    exif = Image.Exif()
    exif[0x0112] = orientation  # Orientation
    stored.save(path, exif=exif, **kw)


def _write_photos(root: Path) -> list[str]:
    """Write the mixed set under root/<class>/; return the relative paths."""
    files: dict[str, Image.Image | None] = {
        "photos/photo.jpg": Image.fromarray(_photo(640, 480, 0)),
        "photos/photo.png": Image.fromarray(_photo(300, 200, 1)),
        "photos/large.jpg": Image.fromarray(_photo(3000, 2000, 2)),
        "photos/tiny.png": Image.fromarray(_photo(5, 7, 3)),
        "photos/photo.bmp": Image.fromarray(_photo(90, 70, 4)),
        "photos/photo.tif": Image.fromarray(_photo(90, 70, 5)),
        "photos/photo.gif": Image.fromarray(_photo(90, 70, 6)).convert("P"),
        "other/grey.png": Image.fromarray(_photo(80, 120, 7)).convert("L"),
        "other/cmyk.jpg": Image.fromarray(_photo(120, 80, 8)).convert("CMYK"),
        "other/rgba.png": Image.fromarray(_photo(64, 64, 9)).convert("RGBA"),
        "other/palette.png": Image.fromarray(_photo(64, 64, 10)).convert("P"),
        "other/sixteen.png": Image.fromarray(_photo(50, 50, 11)[..., 0].astype(np.uint16) * 257),
        "other/rotated6.jpg": None,
        "other/rotated8.jpg": None,
    }
    if features.check("webp"):
        files["photos/photo.webp"] = Image.fromarray(_photo(90, 70, 12))
    for rel, img in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if img is None:
            _save_rotated(path, int(rel[-5]), quality=95)
        else:
            img.save(path)
    assert Image.open(root / "other/sixteen.png").mode.startswith("I")
    assert Image.open(root / "other/cmyk.jpg").mode == "CMYK"
    return sorted(files)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("photos")
    return root, _write_photos(root)


def _manifest(root: Path, rels: list[str]) -> Path:
    lines = ["path,label"] + [f"{rel},{rel.split('/')[0]}" for rel in rels]
    path = root / "manifest.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("channels", [1, 3])
def test_folder_and_manifest_load_every_format(photos, tmp_path: Path, channels: int):
    root, rels = photos
    folder = build_source(
        FolderData(kind="folder", root=str(root), size=SIZE, channels=channels, extensions=EXTS),
        tmp_path / "folder",
    )
    manifest = build_source(
        ManifestData(
            kind="manifest", manifest=str(_manifest(root, rels)), size=SIZE, channels=channels
        ),
        tmp_path / "manifest",
    )
    assert sorted(x.id for x in folder.items) == rels
    assert sorted(x.id for x in manifest.items) == rels
    a, b = folder.load(rels), manifest.load(rels)
    assert a.shape == (len(rels), SIZE, SIZE, channels) and a.dtype == np.uint8
    assert np.array_equal(a, b)
    # Photo content survives: no image came out flat (a decode that failed to a constant would).
    assert (a.reshape(len(rels), -1).std(axis=1) > 10).all()


def test_uniform_colours_map_to_known_values(tmp_path: Path):
    rgb = (200, 30, 90)
    luma = round(0.299 * 200 + 0.587 * 30 + 0.114 * 90)  # ITU-R 601-2: 87.67 -> 88
    for name, img in {
        "rgb.png": Image.new("RGB", (50, 30), rgb),
        "tiny.png": Image.new("RGB", (5, 7), rgb),
        "big.bmp": Image.new("RGB", (1000, 700), rgb),
    }.items():
        img.save(tmp_path / name)
        assert (read_image(tmp_path / name, SIZE, 3) == rgb).all(), name
        assert (np.abs(read_image(tmp_path / name, SIZE, 1).astype(int) - luma) <= 1).all(), name
    Image.new("L", (40, 40), 77).save(tmp_path / "grey.png")
    assert (read_image(tmp_path / "grey.png", SIZE, 3) == 77).all()  # grey -> R = G = B


def test_cmyk_converts_like_pillow(tmp_path: Path):
    Image.new("CMYK", (40, 40), (0, 255, 255, 0)).save(tmp_path / "red.jpg", quality=95)
    red = read_image(tmp_path / "red.jpg", SIZE, 3).astype(int)
    assert (np.abs(red - (255, 0, 0)) <= 3).all()
    Image.fromarray(_photo(120, 80, 3)).convert("CMYK").save(tmp_path / "photo.jpg")
    with Image.open(tmp_path / "photo.jpg") as im:
        want = np.asarray(im.convert("RGB").resize((SIZE, SIZE), Image.Resampling.BILINEAR))
    assert np.array_equal(read_image(tmp_path / "photo.jpg", SIZE, 3), want)


@pytest.mark.parametrize("orientation", sorted(STORED))
def test_exif_rotated_photo_loads_upright(tmp_path: Path, orientation: int):
    _upright().save(tmp_path / "upright.png")
    _save_rotated(tmp_path / "stored.png", orientation)
    with Image.open(tmp_path / "stored.png") as im:  # the file really is stored rotated
        assert im.getexif()[0x0112] == orientation
        assert im.size == ((60, 40) if orientation == 3 else (40, 60))
    want = read_image(tmp_path / "upright.png", SIZE, 3)
    assert np.array_equal(read_image(tmp_path / "stored.png", SIZE, 3), want)
    # A phone's JPEG: same picture up to compression noise, far from the unrotated pixels.
    _save_rotated(tmp_path / "phone.jpg", orientation, quality=95)
    got = read_image(tmp_path / "phone.jpg", SIZE, 3).astype(int)
    assert np.abs(got - want).mean() < 4
    with Image.open(tmp_path / "phone.jpg") as im:
        ignored = np.asarray(im.convert("RGB").resize((SIZE, SIZE), Image.Resampling.BILINEAR))
    assert np.abs(ignored.astype(int) - want).mean() > 20


def test_transparency_is_composited_over_white(tmp_path: Path):
    arr = np.zeros((32, 32, 4), np.uint8)  # transparent black
    arr[:, 16:] = (10, 20, 30, 255)  # opaque right half
    arr[:8, :8] = (0, 0, 0, 128)  # half-transparent black corner
    Image.fromarray(arr, "RGBA").save(tmp_path / "rgba.png")
    got = read_image(tmp_path / "rgba.png", 32, 3)
    assert (got[8:, :16] == 255).all()  # fully transparent -> white, not the stored black
    assert (got[:, 16:] == (10, 20, 30)).all()
    assert (got[:8, :8] == 127).all()  # 255 * (1 - 128/255)
    assert (read_image(tmp_path / "rgba.png", 32, 1)[8:, :16] == 255).all()
    # Strokes drawn in black on a transparent background stay visible.
    la = np.zeros((32, 32, 2), np.uint8)
    la[10:20, 10:20, 1] = 255  # black opaque square
    Image.fromarray(la, "LA").save(tmp_path / "la.png")
    got = read_image(tmp_path / "la.png", 32, 1)[..., 0]
    assert (got[10:20, 10:20] == 0).all() and (got[:10] == 255).all()
    # A palette image with a transparent index.
    pal = Image.new("P", (32, 32), 0)
    pal.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    pal.paste(1, (0, 0, 32, 16))
    pal.save(tmp_path / "pal.png", transparency=0)
    got = read_image(tmp_path / "pal.png", 32, 3)
    assert (got[:16] == (255, 0, 0)).all() and (got[16:] == 255).all()


def test_sixteen_bit_greyscale_is_scaled_not_clipped(tmp_path: Path):
    ramp = np.linspace(0, 65535, 32 * 32).reshape(32, 32).astype(np.uint16)
    Image.fromarray(ramp).save(tmp_path / "ramp.png")
    with Image.open(tmp_path / "ramp.png") as im:
        assert im.mode.startswith("I")
    want = (ramp.astype(np.int64) * 255 + 32767) // 65535
    assert np.array_equal(read_image(tmp_path / "ramp.png", 32, 1)[..., 0], want)
    assert np.array_equal(
        read_image(tmp_path / "ramp.png", 32, 3), np.repeat(want[..., None], 3, -1)
    )
    Image.fromarray(np.full((10, 10), 40000, np.uint16)).save(tmp_path / "flat.png")
    assert (read_image(tmp_path / "flat.png", SIZE, 1) == 156).all()  # 40000 * 255 / 65535


def test_non_square_images_are_squashed_not_cropped_or_padded(tmp_path: Path):
    arr = np.full((100, 200), 255, np.uint8)
    arr[:, :50] = 0  # the left quarter is black
    Image.fromarray(arr).save(tmp_path / "wide.png")
    got = read_image(tmp_path / "wide.png", SIZE, 1)[..., 0].astype(int)
    assert (got == got[0]).all()  # every row alike: no padding bands above or below
    # The black quarter keeps a quarter of the width: a centre crop would have cut it off.
    assert (got[0] < 128).sum() == SIZE // 4
