"""Gallery formats: each reads back what was written, in blocks and whole; wrong schemas are
one-line errors naming the file and the field; an .npz bomb is refused from its headers."""

from __future__ import annotations

import time
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compat.embeddings import bundle as B
from compat.embeddings.bundle import EmbeddingBundle, Sidecar, save_bundle, save_sidecar
from compat.embeddings.formats import format_of, sidecar_of, write_dataset_meta, write_shard
from compat.embeddings.reader import GalleryReader, load_gallery
from compat.errors import BadInputError, UsageError


def _data(n=23, d=4, seed=0):
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n, d)).astype(np.float32)
    return emb, np.arange(n) % 5, np.array([f"id{i}" for i in range(n)])


def _write_all(tmp_path, emb, labels, ids):
    save_bundle(
        tmp_path / "g.npz",
        EmbeddingBundle(emb, labels, ids=ids.tolist(), version="v1", fingerprint="f"),
    )
    np.save(tmp_path / "g.npy", emb)
    save_sidecar(
        sidecar_of(tmp_path / "g.npy"),
        Sidecar(labels, ids, None, "v1", "f", {}),
    )
    folder = tmp_path / "g"
    folder.mkdir()
    write_shard(folder / "part-0.parquet", ids[:10], emb[:10], labels[:10], None)
    write_shard(folder / "part-1.parquet", ids[10:], emb[10:], labels[10:], None)
    write_dataset_meta(folder, "v1", "f", {})
    return [tmp_path / "g.npz", tmp_path / "g.npy", folder]


def test_format_follows_the_path(tmp_path):
    assert format_of(tmp_path / "a.npz") == "npz"
    assert format_of(tmp_path / "a.npy") == "npy"
    assert format_of(tmp_path / "shards") == "parquet"
    with pytest.raises(UsageError, match=r"unknown gallery format '\.h5'"):
        format_of(tmp_path / "a.h5")


@pytest.mark.parametrize("size", [1, 7, 10, 100])
def test_every_format_reads_the_same_rows_in_blocks(tmp_path, size):
    emb, labels, ids = _data()
    for path in _write_all(tmp_path, emb, labels, ids):
        r = GalleryReader(path)
        assert (r.n, r.dim, r.version, r.fingerprint) == (23, 4, "v1", "f")
        blocks = list(r.blocks(size))
        assert [b.start for b in blocks] == list(range(0, 23, size))
        np.testing.assert_array_equal(np.concatenate([b.embeddings for b in blocks]), emb)
        np.testing.assert_array_equal(np.concatenate([b.labels for b in blocks]), labels)
        assert np.concatenate([b.ids for b in blocks]).tolist() == ids.tolist()
        skipped = list(r.blocks(size, skip={0}))
        assert [b.start for b in skipped] == list(range(size, 23, size))
        whole = load_gallery(path)
        np.testing.assert_array_equal(whole.embeddings, emb)
        assert whole.labels.tolist() == labels.tolist() and whole.ids == ids.tolist()


def test_npy_gallery_is_memory_mapped(tmp_path):
    emb, labels, ids = _data()
    _write_all(tmp_path, emb, labels, ids)
    g = load_gallery(tmp_path / "g.npy")
    assert isinstance(g.embeddings.base, np.memmap) or isinstance(g.embeddings, np.memmap)


def _shard(path, **cols):
    pq.write_table(pa.table(cols), path)


def _fsl(x, d):
    return pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), d)


BAD_SCHEMAS = {
    "no id": (lambda e: {"embedding": _fsl(e, 4)}, r"part\.parquet: id: missing column"),
    "float64": (
        lambda e: {"id": ["a", "b"], "embedding": _fsl(e.astype(np.float64), 4)},
        r"part\.parquet: embedding: expected fixed_size_list<float32>\[d\], got fixed_size_list",
    ),
    "variable list": (
        lambda e: {"id": ["a", "b"], "embedding": pa.array(e.tolist())},
        r"embedding: expected fixed_size_list<float32>\[d\], got list<\w+: double>",
    ),
    "string label": (
        lambda e: {"id": ["a", "b"], "embedding": _fsl(e, 4), "label": ["x", "y"]},
        r"part\.parquet: label: expected integers",
    ),
    "int id": (
        lambda e: {"id": [1, 2], "embedding": _fsl(e, 4)},
        r"part\.parquet: id: expected strings",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SCHEMAS))
def test_wrong_parquet_schema_names_file_and_field(tmp_path, case):
    make, pattern = BAD_SCHEMAS[case]
    folder = tmp_path / "g"
    folder.mkdir()
    _shard(folder / "part.parquet", **make(np.ones((2, 4), np.float32)))
    with pytest.raises(BadInputError, match=pattern):
        GalleryReader(folder)


def test_bad_npy_and_parquet_contents(tmp_path):
    np.save(tmp_path / "f.npy", np.ones((3, 4), np.float32).T)  # Fortran order
    with pytest.raises(BadInputError, match=r"f\.npy: embeddings: stored in Fortran order"):
        GalleryReader(tmp_path / "f.npy")
    np.save(tmp_path / "v.npy", np.ones(5, np.float32))
    with pytest.raises(BadInputError, match=r"v\.npy: embeddings: expected a 2-D array"):
        GalleryReader(tmp_path / "v.npy")
    x = np.ones((4, 2), np.float32)
    x[2, 1] = np.nan
    np.save(tmp_path / "n.npy", x)
    with pytest.raises(BadInputError, match=r"n\.npy: embeddings: NaN or inf \(first in row 2\)"):
        list(GalleryReader(tmp_path / "n.npy").blocks(2))
    np.save(tmp_path / "t.npy", np.ones((100, 4), np.float32))
    raw = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(raw[:-40])
    with pytest.raises(BadInputError, match=r"t\.npy: embeddings: truncated"):
        GalleryReader(tmp_path / "t.npy")
    np.save(tmp_path / "nolabels.npy", np.ones((3, 4), np.float32))
    with pytest.raises(BadInputError, match=r"nolabels\.npy: labels: .*nolabels\.meta\.npz"):
        load_gallery(tmp_path / "nolabels.npy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInputError, match=r"empty: shards: no \*\.parquet"):
        GalleryReader(tmp_path / "empty")


def _bomb(path, n, d):
    """An .npz of zeros declaring (n, d) float32: tiny compressed, n x d x 4 bytes expanded."""
    from numpy.lib import format as npf

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, shape, dt in (("embeddings", (n, d), "<f4"), ("labels", (n,), "<i8")):
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                npf.write_array_header_1_0(f, {"descr": dt, "fortran_order": False, "shape": shape})
                left = int(np.prod(shape)) * np.dtype(dt).itemsize
                chunk = bytes(1 << 22)
                while left:
                    f.write(chunk[: min(left, len(chunk))])
                    left -= min(left, len(chunk))


def test_npz_bomb_is_refused_from_its_headers(tmp_path, monkeypatch):
    """The check that refuses the 3.9 MB archive declaring 8M x 128 (see the slow test), at a
    size a fast test can build: 256k x 128 zeros (128 MiB expanded, ~0.1 MiB on disk)."""
    monkeypatch.setattr(B, "BOMB_MIN_BYTES", 1 << 20)
    _bomb(tmp_path / "bomb.npz", 256_000, 128)
    t0 = time.perf_counter()
    with pytest.raises(
        BadInputError, match=r"bomb\.npz: embeddings: declares shape \(256000, 128\)"
    ):
        B.load_bundle(tmp_path / "bomb.npz")
    assert time.perf_counter() - t0 < 1.0


def test_npz_declaring_more_than_it_holds_is_refused(tmp_path):
    from numpy.lib import format as npf

    with zipfile.ZipFile(tmp_path / "lie.npz", "w") as z:
        with z.open("embeddings.npy", "w") as f:
            npf.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": (1000, 4)}
            )
            f.write(bytes(64))
        z.writestr("labels.npy", b"")
    with pytest.raises(BadInputError, match=r"lie\.npz: embeddings: header declares shape"):
        B.load_bundle(tmp_path / "lie.npz")


@pytest.mark.slow
def test_the_8m_by_128_bomb_is_refused_in_under_a_second(tmp_path):
    _bomb(tmp_path / "bomb.npz", 8_000_000, 128)  # ~40 s to build: zlib over 4 GB of zeros
    assert (tmp_path / "bomb.npz").stat().st_size < 8 << 20
    t0 = time.perf_counter()
    with pytest.raises(BadInputError, match=r"declares shape \(8000000, 128\)"):
        B.load_bundle(tmp_path / "bomb.npz")
    assert time.perf_counter() - t0 < 1.0


def test_a_null_embedding_row_names_the_shard_and_column(tmp_path):
    """Arrow itself cannot decode a null fixed-size-list row (ArrowInvalid): one line, exit 4."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from compat.embeddings.reader import load_gallery

    folder = tmp_path / "g"
    folder.mkdir()
    x = np.ones((6, 4), np.float32)
    mask = pa.array([False, False, True, False, False, False])
    emb = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 4, mask=mask)
    pq.write_table(pa.table({"id": list("abcdef"), "embedding": emb, "label": range(6)}),
                   folder / "p.parquet")  # fmt: skip
    for read in (load_gallery, lambda p: list(GalleryReader(p).blocks(4))):
        with pytest.raises(BadInputError) as info:
            read(folder)
        assert str(info.value).startswith(f"{folder / 'p.parquet'}: embedding: cannot be read (")
        assert "null rows?" in str(info.value)
