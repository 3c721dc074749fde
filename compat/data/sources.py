"""Image sources: the embedded glyphs, an image folder, a CSV manifest.

The ``data`` stage turns a source's params into ``data/source.json``: the list of items
(id, label, group), the image size and channels, where the pixels live, and a fingerprint of
the content. Every later stage opens the source through that file with ``open_source``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from compat.data.config import DataParams, EmbeddedData, FolderData, ManifestData
from compat.errors import BadInputError, NotFoundError
from compat.files import open_regular, read_regular_bytes
from compat.io import atomic_path, fingerprint, storage_error, write_json

SOURCE_FILE = "source.json"
# Largest image (width x height) a folder or manifest source decodes: 8192 x 8192. Every image is
# resized to at most 112 px, so nothing real comes near it; docs/design.md "Exit codes".
MAX_IMAGE_PIXELS = 8192 * 8192


@dataclass(frozen=True)
class Item:
    id: str
    label: str
    group: str | None = None


class Source:
    """A set of labelled images addressed by item id."""

    def __init__(
        self,
        kind: str,
        items: list[Item],
        image_size: int,
        channels: int,
        fingerprint: str,
        root: Path,
        images_file: Path | None = None,
    ) -> None:
        self.kind = kind
        self.items = items
        self.image_size = image_size
        self.channels = channels
        self.fingerprint = fingerprint
        self.root = root
        self._images_file = images_file
        self._array: np.ndarray | None = None
        self._index = {item.id: i for i, item in enumerate(items)}

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._index

    @property
    def in_memory(self) -> bool:
        """True when pixels come from one array file (the embedded glyphs), not image files."""
        return self._images_file is not None

    def path_of(self, item_id: str) -> Path:
        """The file an item is read from (image folders and manifests)."""
        return self.root / item_id

    def load(self, ids: Sequence[str]) -> np.ndarray:
        """Pixels of the given items: uint8 (n, H, W, C)."""
        try:
            rows = [self._index[i] for i in ids]
        except KeyError as err:
            raise NotFoundError(f"item {err.args[0]!r} is not in the {self.kind} source") from None
        if self._images_file is not None:
            if self._array is None:
                self._array = np.load(self._images_file, mmap_mode="r", allow_pickle=False)
            return np.ascontiguousarray(self._array[np.asarray(rows, dtype=np.int64)])
        out = np.empty((len(ids), self.image_size, self.image_size, self.channels), np.uint8)
        for k, item_id in enumerate(ids):
            out[k] = read_image(self.path_of(item_id), self.image_size, self.channels)
        return out

    def describe(self) -> dict:
        labels = {item.label for item in self.items}
        return {
            "kind": self.kind,
            "items": len(self.items),
            "classes": len(labels),
            "image_size": self.image_size,
            "channels": self.channels,
            "fingerprint": self.fingerprint,
        }


def read_image(path: Path, size: int, channels: int) -> np.ndarray:
    """Decode one image file into uint8 (size, size, channels); a corrupt file names itself.

    The image is turned upright by its EXIF orientation tag (phones store photos rotated and
    say so there), converted to 8-bit L or RGB by :func:`_to_mode`, then resized to
    ``size`` x ``size`` with Pillow's bilinear filter (antialiased when shrinking). The aspect
    ratio is not kept: a non-square image is squashed, neither cropped nor padded.

    An image over :data:`MAX_IMAGE_PIXELS` is refused from its header, before any pixel is
    decoded (a few-kB PNG can declare gigapixels: a decompression bomb). Only a regular file is
    read (:func:`open_regular`): a FIFO or a device named as an image would block or never end.
    """
    try:
        f = open_regular(path, "an image")
        with warnings.catch_warnings():
            # Pillow warns from 89 Mpx on; the cap below is the decision, not Pillow's warning.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            try:
                img_file = Image.open(f)
            except BaseException:
                f.close()
                raise
        with f, img_file as img:
            width, height = img.size
            if width * height > MAX_IMAGE_PIXELS:
                raise BadInputError(
                    f"{path}: image is {width} x {height} = {width * height} pixels, over the "
                    f"cap of {MAX_IMAGE_PIXELS} (decompression bomb?)"
                )
            img = _to_mode(ImageOps.exif_transpose(img), "L" if channels == 1 else "RGB")
            if img.size != (size, size):
                img = img.resize((size, size), Image.Resampling.BILINEAR)
            arr = np.asarray(img, dtype=np.uint8)
    except FileNotFoundError:
        raise NotFoundError(f"{path}: image file not found") from None
    except Image.DecompressionBombError:  # over Pillow's own limit: refused while opening
        raise BadInputError(
            f"{path}: image declares more than {Image.MAX_IMAGE_PIXELS * 2} pixels, over the cap "
            f"of {MAX_IMAGE_PIXELS} (decompression bomb?)"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise BadInputError(f"{path}: unreadable or corrupt image ({err})") from None
    return arr[:, :, None] if channels == 1 else arr


# How a file becomes pixels, before resizing: part of a folder or manifest source's fingerprint,
# so a change here re-keys everything computed from the pixels.
DECODE_ID = "exif-upright/alpha-over-white/16bit-scaled"
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N", "I")


def _to_mode(img: Image.Image, mode: str) -> Image.Image:
    """``img`` as 8-bit ``mode`` ("L" or "RGB"), without Pillow's lossy shortcuts.

    - transparency (an alpha channel, or a palette or colour key marked transparent) is
      composited over white: Pillow's plain ``convert`` would drop the alpha and keep whatever
      colour the transparent pixels happen to store (often black, so black strokes on a
      transparent background would load as an all-black square);
    - 16-bit greyscale (modes ``I;16*`` and ``I``, e.g. a 16-bit PNG) is scaled to 8 bits
      (v * 255 / 65535, rounded; values outside 0..65535 clipped): Pillow's ``convert`` clips
      it at 255 instead, turning most of the image white;
    - everything else (CMYK, YCbCr, palette, 1-bit, L <-> RGB) is Pillow's ``convert`` (ITU-R
      601-2 luma for RGB -> L; no ICC colour management).
    """
    if img.mode in _SIXTEEN_BIT:
        wide = np.asarray(img).astype(np.int64).clip(0, 65535)
        img = Image.fromarray(((wide * 255 + 32767) // 65535).astype(np.uint8), "L")
    if img.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in img.info:
        rgba = img.convert("RGBA")
        img = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return img if img.mode == mode else img.convert(mode)


def _check_images(root: Path, items: list[Item], size: int, channels: int) -> str:
    """Decode every image once (reporting all corrupt files) and return a content digest."""
    digest = hashlib.sha256()
    bad = []
    for item in items:
        path = root / item.id
        try:
            read_image(path, size, channels)  # names the file and what is wrong with it
            with open_regular(path, "an image") as f:
                data = f.read()
        except (BadInputError, NotFoundError) as err:
            bad.append(str(err))
            continue
        except OSError as err:
            bad.append(f"{path}: {err.strerror or err}")
            continue
        digest.update(f"{item.id}\0{item.label}\0{item.group}\0".encode())
        digest.update(hashlib.sha256(data).digest())
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise BadInputError(f"{len(bad)} unreadable image(s): " + "; ".join(bad[:3]) + more)
    return digest.hexdigest()[:16]


def scan_folder(params: FolderData) -> tuple[Path, list[Item]]:
    """Items of an image folder: ``root/<class>/<file>``; ids are paths relative to root."""
    root = Path(params.root)
    if not root.is_dir():
        raise NotFoundError(f"{root}: image folder not found (data.root)")
    real_root = root.resolve()
    exts = {e.lower() for e in params.extensions}
    items: list[Item] = []
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise BadInputError(f"{root}: no class sub-folders (data.root)")
    for cls in classes:
        files = sorted(f for f in cls.rglob("*") if f.is_file() and f.suffix.lower() in exts)
        if not files:
            raise BadInputError(f"{cls}: empty class: no image with extension {sorted(exts)}")
        for f in files:
            # A symlink (of the file or of a class folder) may point anywhere: like a manifest
            # row, nothing outside the root is read.
            if not f.resolve().is_relative_to(real_root):
                raise BadInputError(
                    f"{f}: links to {f.resolve()}, outside the root {root} (data.root)"
                )
        items.extend(Item(f.relative_to(root).as_posix(), cls.name) for f in files)
    return root, items


def read_manifest(params: ManifestData) -> tuple[Path, list[Item]]:
    """Items of a CSV manifest ``path,label[,group]``; a path escaping the root is rejected; a
    line csv cannot parse (a field over its 128 kB limit, a NUL byte) is named."""
    manifest = Path(params.manifest)
    if not manifest.is_file():
        raise NotFoundError(f"{manifest}: manifest not found (data.manifest)")
    root = Path(params.root) if params.root is not None else manifest.parent
    if not root.is_dir():
        raise NotFoundError(f"{root}: manifest root not found (data.root)")
    real_root = root.resolve()
    raw = manifest.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # a BOM (spreadsheet export) is not part of the header
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise BadInputError(
            f"{manifest}:{line}: not valid UTF-8 (byte 0x{raw[err.start]:02x}); save the "
            "manifest as UTF-8 (data.manifest)"
        ) from None
    fetched = 0  # the physical line csv last took: where a parse error is

    def lines(f: io.StringIO):
        nonlocal fetched
        for physical in f:
            fetched += 1
            yield physical

    with io.StringIO(text, newline="") as f:
        try:
            return _manifest_rows(manifest, root, real_root, csv.DictReader(lines(f)))
        except csv.Error as err:  # a field over csv.field_size_limit (128 kB), a NUL byte, ...
            raise BadInputError(f"{manifest}:{fetched}: {err} (data.manifest)") from None


def _manifest_rows(
    manifest: Path, root: Path, real_root: Path, reader: csv.DictReader
) -> tuple[Path, list[Item]]:
    items: list[Item] = []
    seen: set[str] = set()
    fields = reader.fieldnames or []
    missing = [c for c in ("path", "label") if c not in fields]
    if missing:
        raise BadInputError(f"{manifest}: header: missing column(s) {missing}")
    extra = [c for c in fields if c not in ("path", "label", "group")]
    if extra:
        raise BadInputError(f"{manifest}: header: unknown column(s) {extra}")
    for line, row in enumerate(reader, start=2):
        path, label = (row.get("path") or "").strip(), (row.get("label") or "").strip()
        if not path or not label:
            raise BadInputError(f"{manifest}:{line}: path and label must not be empty")
        resolved = (root / path).resolve()
        if not resolved.is_relative_to(real_root):
            raise BadInputError(f"{manifest}:{line}: path {path!r} escapes the root {root}")
        item_id = resolved.relative_to(real_root).as_posix()
        if item_id in seen:
            raise BadInputError(f"{manifest}:{line}: path {path!r} is listed twice")
        seen.add(item_id)
        group = (row.get("group") or "").strip() or None
        items.append(Item(item_id, label, group))
    if not items:
        raise BadInputError(f"{manifest}: no rows")
    return real_root, items


def _cache_dir(params: EmbeddedData) -> Path:
    if params.cache:
        return Path(params.cache)
    env = os.environ.get("COMPAT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "compat"


def build_source(params: DataParams, out_dir: str | os.PathLike[str] = "data") -> Source:
    """Materialise a source from its params into ``out_dir`` (the data stage's work)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # e.g. a file where the folder should be
        full = storage_error(err, out)
        if full is not None:  # a read-only file system or a full disk: exit 5
            raise full from None
        raise BadInputError(f"{out}: cannot create the output folder ({err.strerror})") from None
    meta: dict = {"kind": params.kind, "image_size": params.size, "channels": params.channels}
    if isinstance(params, EmbeddedData):
        from compat.data.embedded import (
            cached_render,
            embedded_fingerprint,
            render_dataset,
            select_codepoints,
        )

        gen = params.model_dump(exclude={"workers", "cache", "kind"})
        fp = embedded_fingerprint(gen)
        codepoints = select_codepoints(params.classes, params.seed, params.max_strokes)

        def render() -> np.ndarray:
            return render_dataset(
                codepoints,
                params.images_per_class,
                params.seed,
                params.size,
                params.channels,
                params.distortion,
                params.workers,
            )

        shape = (
            len(codepoints) * params.images_per_class,
            params.size,
            params.size,
            params.channels,
        )
        images = cached_render(_cache_dir(params), fp, render, shape)
        with atomic_path(out / "glyphs.npy", size=images.nbytes + 128) as tmp, open(tmp, "wb") as f:
            np.save(f, images, allow_pickle=False)
        items = [
            Item(f"{cp:05x}/{i:03d}", chr(cp))
            for cp in codepoints
            for i in range(params.images_per_class)
        ]
        meta.update(fingerprint=fp, images="glyphs.npy", root=".")
    else:
        root, items = (
            scan_folder(params) if isinstance(params, FolderData) else read_manifest(params)
        )
        digest = _check_images(root, items, params.size, params.channels)
        fp = fingerprint(
            {
                "content": digest,
                "size": params.size,
                "channels": params.channels,
                "decode": DECODE_ID,
            }
        )
        meta.update(fingerprint=fp, root=os.path.relpath(root.resolve(), out.resolve()))
    meta["items"] = [[it.id, it.label, it.group] for it in items]
    write_json(out / SOURCE_FILE, meta, indent=None)
    return open_source(out / SOURCE_FILE)


def open_source(path: str | os.PathLike[str] = f"data/{SOURCE_FILE}") -> Source:
    """Open the source a ``data`` stage wrote."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"{path}: no data source; run the data stage first (dvc repro data)")
    try:
        meta = json.loads(read_regular_bytes(path, "the data stage's JSON").decode("utf-8"))
        items = [Item(i, lab, grp) for i, lab, grp in meta["items"]]
        root = (path.parent / meta["root"]).resolve()
        images = path.parent / meta["images"] if meta.get("images") else None
        return Source(
            meta["kind"],
            items,
            int(meta["image_size"]),
            int(meta["channels"]),
            meta["fingerprint"],
            root,
            images,
        )
    except UnicodeDecodeError:
        raise BadInputError(f"{path}: malformed source description (not UTF-8)") from None
    except json.JSONDecodeError as err:
        raise BadInputError(
            f"{path}: malformed source description (not JSON: {err.msg} at line {err.lineno})"
        ) from None
    except (KeyError, ValueError, TypeError) as err:
        raise BadInputError(f"{path}: malformed source description ({err!r})") from None
