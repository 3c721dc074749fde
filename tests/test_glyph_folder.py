"""scripts/make_glyph_folder.py (issue 42 item 2): a real image folder of printed characters that
the folder data source reads, the same bytes on every run, and a non-empty --out kept unless
--force."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from compat.data.config import FolderData
from compat.data.sources import build_source, scan_folder

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "make_glyph_folder.py"
CLASSES, PER_CLASS = 5, 3


def _make(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["--out", str(out), "--classes", str(CLASSES), "--per-class", str(PER_CLASS)]
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, *extra], capture_output=True, text=True, cwd=REPO
    )


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("glyphs") / "images"
    r = _make(out)
    assert r.returncode == 0, r.stderr
    return out


def test_the_same_arguments_give_the_same_bytes(folder: Path, tmp_path: Path):
    again = tmp_path / "images"
    assert _make(again).returncode == 0
    assert _digest(again) == _digest(folder)


def test_one_sub_folder_per_class_of_grayscale_pngs_the_folder_source_reads(
    folder: Path, tmp_path: Path
):
    classes = sorted(p for p in folder.iterdir() if p.is_dir())
    assert len(classes) == CLASSES
    assert all(c.name.startswith("U+") for c in classes)
    for c in classes:
        files = sorted(c.iterdir())
        assert [f.name for f in files] == [f"{i:03d}.png" for i in range(PER_CLASS)]
        for f in files:
            with Image.open(f) as img:
                assert (img.format, img.mode, img.size) == ("PNG", "L", (32, 32))
    _root, items = scan_folder(FolderData(kind="folder", root=str(folder)))
    assert len(items) == CLASSES * PER_CLASS
    assert {it.label for it in items} == {c.name for c in classes}
    source = build_source(FolderData(kind="folder", root=str(folder)), tmp_path / "data")
    assert source.describe()["classes"] == CLASSES
    pixels = source.load([it.id for it in source.items])
    assert pixels.shape == (CLASSES * PER_CLASS, 32, 32, 1)


def test_every_class_has_ink_and_its_own_glyph(folder: Path):
    """Ink bright on dark (the embedded data's convention), no blank image, and each class's
    mean image is unlike every other class's."""
    means = []
    for c in sorted(p for p in folder.iterdir() if p.is_dir()):
        imgs = np.stack([np.asarray(Image.open(f), np.float32) for f in sorted(c.iterdir())])
        assert (imgs.reshape(len(imgs), -1).max(axis=1) > 200).all(), c.name  # bright ink
        assert np.median(imgs) < 40, c.name  # on a dark ground
        means.append(imgs.mean(axis=0).ravel())
    m = np.stack(means)
    dist = np.abs(m[:, None] - m[None]).mean(-1)
    np.fill_diagonal(dist, np.inf)
    assert dist.min() > 2.0, dist.min()


def test_a_non_empty_out_is_refused_without_force(folder: Path, tmp_path: Path):
    out = tmp_path / "images"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    r = _make(out)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--force" in r.stderr, r.stderr
    assert (out / "notes.txt").read_text() == "mine\n"
    r = _make(out, "--force")
    assert r.returncode == 0, r.stderr
    assert not (out / "notes.txt").exists()
    assert _digest(out) == _digest(folder)


def test_help_says_what_it_makes():
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "printed characters" in r.stdout and "--per-class" in r.stdout
