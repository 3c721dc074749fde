from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from compat.data import embedded
from compat.data.config import EmbeddedData, FolderData, ManifestData
from compat.data.sources import build_source, open_source
from compat.errors import BadInputError, NotFoundError


def _png(path: Path, value: int, size: int = 12) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.full((size, size), value, np.uint8)
    arr[2:5, 2:9] = 255 - value
    Image.fromarray(arr).save(path)


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "images"
    for c, cls in enumerate(["cat", "dog", "owl"]):
        for i in range(3):
            _png(root / cls / f"{i}.png", 40 * c + i)
    return root


def test_embedded_source_is_deterministic_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    p = EmbeddedData(
        classes=5, images_per_class=3, size=16, workers=1, cache=str(tmp_path / "cache")
    )
    a = build_source(p, tmp_path / "a")
    b = build_source(p.model_copy(update={"cache": str(tmp_path / "other-cache")}), tmp_path / "b")
    assert a.fingerprint == b.fingerprint
    assert (tmp_path / "a/source.json").read_bytes() == (tmp_path / "b/source.json").read_bytes()
    assert np.array_equal(a.load([x.id for x in a.items]), b.load([x.id for x in b.items]))
    assert len(a.items) == 15 and len({x.label for x in a.items}) == 5

    # A second build with the same fingerprint reuses the cache: rendering must not run.
    def boom(*args, **kwargs):
        raise AssertionError("rendered again despite a cached fingerprint")

    monkeypatch.setattr(embedded, "render_dataset", boom)
    c = build_source(p, tmp_path / "c")
    assert c.fingerprint == a.fingerprint


def test_embedded_fingerprint_tracks_params_not_workers(tmp_path: Path):
    base = EmbeddedData(classes=3, images_per_class=2, size=16, workers=1, cache=str(tmp_path))
    fp = build_source(base, tmp_path / "x").fingerprint
    assert build_source(base.model_copy(update={"workers": 2}), tmp_path / "y").fingerprint == fp
    assert build_source(base.model_copy(update={"seed": 1}), tmp_path / "z").fingerprint != fp


def test_parallel_render_equals_serial():
    cps = embedded.select_codepoints(4, 0, 30)
    from compat.data.render import Distortion

    serial = embedded.render_dataset(cps, 2, 0, 16, 1, Distortion(), workers=1)
    jobs = [(cp, 2, 0, 16, 1, Distortion().model_dump()) for cp in reversed(cps)]
    reordered = np.concatenate([embedded._render_class(j) for j in jobs][::-1])
    assert np.array_equal(serial, reordered)


def test_folder_source(folder: Path, tmp_path: Path):
    src = build_source(FolderData(kind="folder", root=str(folder), size=8), tmp_path / "d")
    assert [x.label for x in src.items] == ["cat"] * 3 + ["dog"] * 3 + ["owl"] * 3
    assert src.items[0].id == "cat/0.png"
    imgs = src.load(["dog/1.png", "cat/0.png"])
    assert imgs.shape == (2, 8, 8, 1) and imgs.dtype == np.uint8
    again = open_source(tmp_path / "d/source.json")
    assert again.fingerprint == src.fingerprint
    assert np.array_equal(again.load(["dog/1.png"]), imgs[:1])


def test_folder_fingerprint_changes_with_content(folder: Path, tmp_path: Path):
    p = FolderData(kind="folder", root=str(folder), size=8)
    fp = build_source(p, tmp_path / "a").fingerprint
    _png(folder / "cat" / "0.png", 200)
    assert build_source(p, tmp_path / "b").fingerprint != fp


def test_folder_errors(folder: Path, tmp_path: Path):
    with pytest.raises(NotFoundError, match="image folder not found"):
        build_source(FolderData(kind="folder", root=str(tmp_path / "missing")), tmp_path / "d")
    (folder / "empty").mkdir()
    with pytest.raises(BadInputError, match="empty class"):
        build_source(FolderData(kind="folder", root=str(folder)), tmp_path / "d")
    (folder / "empty").rmdir()
    (folder / "dog" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(BadInputError, match=r"broken\.png"):
        build_source(FolderData(kind="folder", root=str(folder)), tmp_path / "d")
    assert not (tmp_path / "d" / "source.json").exists()  # nothing half-written


def test_manifest_source(folder: Path, tmp_path: Path):
    csv = tmp_path / "m.csv"
    csv.write_text("path,label,group\ncat/0.png,a,g1\ndog/0.png,b,\nowl/2.png,b,g2\n")
    src = build_source(
        ManifestData(kind="manifest", manifest=str(csv), root=str(folder), size=8), tmp_path / "d"
    )
    assert [(x.id, x.label, x.group) for x in src.items] == [
        ("cat/0.png", "a", "g1"),
        ("dog/0.png", "b", None),
        ("owl/2.png", "b", "g2"),
    ]
    assert src.load(["owl/2.png"]).shape == (1, 8, 8, 1)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("path,label\n../secret.png,a\n", "escapes the root"),
        ("path,label\n/etc/passwd,a\n", "escapes the root"),
        ("path,name\ncat/0.png,a\n", "missing column"),
        ("path,label\ncat/0.png,\n", "must not be empty"),
        ("path,label\ncat/0.png,a\ncat/0.png,b\n", "listed twice"),
        ("path,label\ncat/9.png,a\n", "9.png"),
        ("path,label\n", "no rows"),
    ],
)
def test_manifest_errors(folder: Path, tmp_path: Path, body: str, message: str):
    csv = tmp_path / "m.csv"
    csv.write_text(body)
    with pytest.raises((BadInputError, NotFoundError), match=message) as info:
        build_source(
            ManifestData(kind="manifest", manifest=str(csv), root=str(folder)), tmp_path / "d"
        )
    assert "m.csv" in str(info.value) or "9.png" in str(info.value)


def test_open_source_missing_and_unknown_item(tmp_path: Path, tiny_source):
    with pytest.raises(NotFoundError, match="run the data stage"):
        open_source(tmp_path / "nope.json")
    with pytest.raises(NotFoundError, match="not in the embedded source"):
        tiny_source.load(["zzz"])


def test_a_manifest_may_start_with_a_byte_order_mark(folder: Path, tmp_path: Path):
    csv = tmp_path / "m.csv"
    csv.write_bytes("\ufeffpath,label\ncat/0.png,ä\n".encode())
    src = build_source(
        ManifestData(kind="manifest", manifest=str(csv), root=str(folder), size=8), tmp_path / "d"
    )
    assert [(x.id, x.label) for x in src.items] == [("cat/0.png", "ä")]


def test_a_symlink_inside_the_root_is_read(folder: Path, tmp_path: Path):
    (folder / "dog" / "link.png").symlink_to(folder / "cat" / "0.png")
    src = build_source(FolderData(kind="folder", root=str(folder), size=8), tmp_path / "d")
    assert "dog/link.png" in src
    assert (src.load(["dog/link.png"]) == src.load(["cat/0.png"])).all()


def test_the_image_cap_is_checked_from_the_header(tmp_path: Path, monkeypatch):
    from compat.data import sources

    _png(tmp_path / "a.png", 10, size=12)
    monkeypatch.setattr(sources, "MAX_IMAGE_PIXELS", 144)
    assert sources.read_image(tmp_path / "a.png", 8, 1).shape == (8, 8, 1)
    monkeypatch.setattr(sources, "MAX_IMAGE_PIXELS", 143)
    with pytest.raises(BadInputError, match=r"a.png: image is 12 x 12 = 144 pixels, over the cap"):
        sources.read_image(tmp_path / "a.png", 8, 1)


def test_more_classes_than_kanjivg_has_is_a_params_error(monkeypatch):
    pool = embedded.list_codepoints()[:5]
    monkeypatch.setattr(embedded, "list_codepoints", lambda: pool)
    assert len(embedded.select_codepoints(5, 0, 30)) == 5
    with pytest.raises(BadInputError, match=r"^data.classes: 6 asked for, but only 5 KanjiVG"):
        embedded.select_codepoints(6, 0, 30)
