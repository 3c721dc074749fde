"""A gallery as a LanceDB table (real tables on disk, opened with LanceDB): import from every
file format and export back, bit for bit; each row into its version's column; filling a column
by id rewrites no other column; bad tables are one-line errors naming the table and the field."""

from __future__ import annotations

import lance
import lancedb
import numpy as np
import pyarrow as pa
import pytest

from compat.embeddings.bundle import EmbeddingBundle, Sidecar, save_bundle, save_sidecar
from compat.embeddings.formats import format_of, sidecar_of, write_dataset_meta, write_shard
from compat.embeddings.reader import GalleryReader, load_gallery
from compat.embeddings.table import open_table
from compat.embeddings.table_columns import META_KEY, column_for
from compat.embeddings.table_fill import fill_by_id, table_lock
from compat.embeddings.table_write import export_table, import_gallery, write_table_embeddings
from compat.errors import BadInputError, ConflictError, NotFoundError, UsageError


def _bundle(n=37, d=6, seed=0, version="v1", row_versions=None):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    return EmbeddingBundle(x, np.arange(n) % 5, ids=[f"id{i}" for i in range(n)],
                           version=version, fingerprint="f" * 16, row_versions=row_versions,
                           meta={"classes": ["a", "b"]})  # fmt: skip


def _files(tmp_path, b):
    save_bundle(tmp_path / "g.npz", b)
    np.save(tmp_path / "g.npy", b.embeddings)
    save_sidecar(sidecar_of(tmp_path / "g.npy"),
                 Sidecar(b.labels, np.asarray(b.ids), None, "v1", "f" * 16, {}))  # fmt: skip
    (tmp_path / "shards").mkdir()
    ids = np.asarray(b.ids)
    for s in range(0, len(b), 10):
        write_shard(tmp_path / "shards" / f"p{s:03d}.parquet", ids[s : s + 10],
                    b.embeddings[s : s + 10], b.labels[s : s + 10], None)  # fmt: skip
    write_dataset_meta(tmp_path / "shards", "v1", "f" * 16, {})
    return [tmp_path / "g.npz", tmp_path / "g.npy", tmp_path / "shards"]


def test_import_every_format_then_export_every_format_bit_for_bit(tmp_path):
    b = _bundle()
    for i, src in enumerate(_files(tmp_path, b)):
        table = import_gallery(src, tmp_path / "db" / f"t{i}.lance")
        # a LanceDB table: LanceDB lists it and reads it
        db = lancedb.connect(tmp_path / "db")
        got = db.open_table(f"t{i}").to_arrow()
        assert got.column_names == ["id", "label", "vec_v1"]
        assert got.column("id").to_pylist() == b.ids
        assert np.array_equal(np.stack(got.column("vec_v1").to_numpy(zero_copy_only=False)),
                              b.embeddings)  # fmt: skip
        assert list(table.vectors) == ["vec_v1"] and table.fingerprint == "f" * 16
        for out in ("e.npz", "e.npy", "e_shards"):
            out = tmp_path / f"{i}-{out}"
            assert export_table(table.path, out) == (37, 6, "served rows")
            back = load_gallery(out)
            assert np.array_equal(back.embeddings, b.embeddings) and back.version == "v1"
            assert back.ids == b.ids and np.array_equal(back.labels, b.labels)
    assert sorted(p.name for p in (tmp_path / "db").iterdir()) == [
        "t0.lance",
        "t1.lance",
        "t2.lance",
    ]
    assert format_of(tmp_path / "db" / "t0.lance") == "lance"
    r = GalleryReader(tmp_path / "db" / "t0.lance")  # read like any gallery: the rows served
    assert [blk.start for blk in r.blocks(16)] == [0, 16, 32]
    assert np.array_equal(r.memmap(), b.embeddings) and r.version == "v1"


def test_a_partial_backfill_file_puts_each_row_in_its_versions_column(tmp_path):
    versions = ["v2" if i % 3 == 0 else "v1" for i in range(37)]
    b = _bundle(version=None, row_versions=versions)
    save_bundle(tmp_path / "g.npz", b)
    table = import_gallery(tmp_path / "g.npz", tmp_path / "g.lance")
    assert list(table.vectors) == ["vec_v1", "vec_v2"]
    x2, ok2 = table.read("vec_v2")
    assert ok2.tolist() == [v == "v2" for v in versions]
    assert np.array_equal(x2[ok2], b.embeddings[ok2])
    assert table.row_versions().tolist() == versions
    export_table(table.path, tmp_path / "back.npz")
    back = load_gallery(tmp_path / "back.npz")
    assert back.row_versions == versions and np.array_equal(back.embeddings, b.embeddings)
    with pytest.raises(
        BadInputError,
        match=r"vec_v2: 24 rows are null \(a partial backfill; first row 1, id .id1.\)",
    ):
        export_table(table.path, tmp_path / "x.npz", version="v2")
    with pytest.raises(BadInputError, match=r"vec_v3: no column for version v3"):
        export_table(table.path, tmp_path / "x.npz", version="v3")


def test_filling_a_column_by_id_rewrites_no_other_column(tmp_path):
    b = _bundle()
    save_bundle(tmp_path / "g.npz", b)
    path = tmp_path / "g.lance"
    import_gallery(tmp_path / "g.npz", path)
    ds = lance.dataset(path)
    ds.add_columns({"note": "concat('n', id)"})  # the user's payload column
    before = lance.dataset(path)
    kept = {f.path for frag in before.get_fragments() for f in frag.metadata.files}
    payload = before.to_table(columns=["id", "label", "note", "vec_v1"])
    # v2 rows for a third of the items, in another order (matched by id, not by row)
    v2 = _bundle(d=9, seed=3, version="v2")
    pick = np.random.default_rng(0).permutation(37)[:12]
    sub = EmbeddingBundle(v2.embeddings[pick], v2.labels[pick],
                          ids=[v2.ids[i] for i in pick], version="v2")  # fmt: skip
    table = write_table_embeddings(path, sub)
    after = lance.dataset(path)
    assert after.to_table(columns=["id", "label", "note", "vec_v1"]).equals(payload)
    files = {f.path for frag in after.get_fragments() for f in frag.metadata.files}
    assert kept <= files  # every file of the other columns still read, none rewritten
    x2, ok2 = table.read("vec_v2")
    assert sorted(np.flatnonzero(ok2)) == sorted(pick)
    assert np.array_equal(x2[pick], v2.embeddings[pick])
    assert table.vectors["vec_v2"].sources == [
        {"kind": "embedded", "items": None, "fingerprint": None, "weights_sha256": None}
    ]
    # an id the table does not hold, a column of another width
    bad = EmbeddingBundle(v2.embeddings[:2], v2.labels[:2], ids=["id0", "nope"], version="v2")
    with pytest.raises(
        BadInputError, match=r"ids: 1 ids are not rows of .*g\.lance \(first: 'nope'\)"
    ):
        write_table_embeddings(path, bad)
    wide = _bundle(d=4, version="v2")
    with pytest.raises(
        BadInputError,
        match=r"g\.lance: vec_v2: the column holds 9-dim rows, the new rows are 4-dim",
    ):
        write_table_embeddings(path, wide)
    # one writer at a time
    with table_lock(path), pytest.raises(ConflictError, match=r"is writing this table"):
        fill_by_id(path, table.vectors["vec_v2"], np.array(["id1"]), v2.embeddings[:1], where="x")


def _table(tmp_path, columns, name="t.lance", metadata=None):
    path = tmp_path / name
    t = pa.table(columns)
    if metadata:
        t = t.replace_schema_metadata(metadata)
    lance.write_dataset(t, path)
    return path


def _vec(x, d, t=pa.float32()):
    return pa.FixedSizeListArray.from_arrays(pa.array(np.asarray(x).ravel(), type=t), d)


X = np.arange(12, dtype=np.float32).reshape(4, 3) + 1


@pytest.mark.parametrize(
    ("columns", "field_meta", "message"),
    [
        ({"key": ["a", "b", "c", "d"], "vec_v1": _vec(X, 3)}, None,
         r"t\.lance: id: missing column \(columns present: key, vec_v1\)"),
        ({"id": ["a", "b", "a", "d"], "vec_v1": _vec(X, 3)}, None,
         r"t\.lance: id: duplicate id 'a' \(rows 0 and 2\)"),
        ({"id": ["a", None, "c", "d"], "vec_v1": _vec(X, 3)}, None,
         r"t\.lance: id: 1 null ids \(first in row 1\)"),
        ({"id": ["a", "b", "c", "d"], "vec_v1": _vec(X, 3, pa.float64())}, None,
         r"t\.lance: vec_v1: expected fixed_size_list<float32>\[d\], got fixed_size_list<item: double>\[3\]"),
        ({"id": ["a", "b", "c", "d"], "vec_none": _vec(X, 3)}, None,
         r"t\.lance: vec_none: not named for a version \(name 'none'"),
        ({"id": ["a", "b", "c", "d"], "vec_v1": _vec(X, 3)}, {"version": "v2", "dim": 3},
         r"t\.lance: vec_v1: metadata compat: version 'v2' belongs in column vec_v2, not vec_v1"),
        ({"id": ["a", "b", "c", "d"], "vec_v1": _vec(X, 3)}, {"version": "v1", "dim": 4},
         r"t\.lance: vec_v1: 3-dim rows, but its metadata records 4 \(the wrong width\)"),
        ({"id": ["a", "b", "c", "d"], "payload": [1, 2, 3, 4]}, None,
         r"t\.lance: vec_\*: no vector column"),
        ({"id": [1, 2, 3, 4], "vec_v1": _vec(X, 3)}, None, r"t\.lance: id: expected strings, got int64"),
    ],
    ids=["no-ids", "duplicate-ids", "null-id", "float64", "not-a-version", "other-version",
         "wrong-width", "no-vectors", "int-ids"],
)  # fmt: skip
def test_a_bad_table_is_one_line_naming_the_table_and_the_field(
    tmp_path, columns, field_meta, message
):
    path = _table(tmp_path, columns)
    if field_meta is not None:
        import json

        lance.dataset(path).update_field_metadata({"vec_v1": {META_KEY: json.dumps(field_meta)}})
    with pytest.raises(BadInputError, match=message):
        open_table(path).check_ids()


def test_a_table_made_without_compat_is_read_by_its_column_names(tmp_path):
    x = np.where(np.arange(4)[:, None] < 2, X, np.nan)  # rows 2 and 3 have no v2 yet
    v2 = pa.FixedSizeListArray.from_arrays(pa.array(np.nan_to_num(x).ravel()), 3,
                                           mask=pa.array([False, False, True, True]))  # fmt: skip
    path = _table(tmp_path, {"id": ["a", "b", "c", "d"], "label": [0, 1, 0, 1],
                             "vec_v1": _vec(X, 3), "vec_v3-paragon": v2})  # fmt: skip
    t = open_table(path)
    assert [c.version for c in t.vectors.values()] == ["v1", "v3-paragon"]
    assert t.row_versions().tolist() == ["v3-paragon", "v3-paragon", "v1", "v1"]
    assert column_for("v1.2") == "vec_v1_2"  # Lance column names hold no dot


def test_missing_and_misnamed_tables(tmp_path):
    with pytest.raises(NotFoundError, match=r"nope\.lance: table not found"):
        open_table(tmp_path / "nope.lance")
    with pytest.raises(UsageError, match=r"ends in \.lance"):
        open_table(tmp_path / "nope")
    (tmp_path / "f.lance").write_text("x")
    with pytest.raises(BadInputError, match=r"f\.lance: not a Lance table"):
        open_table(tmp_path / "f.lance")
    b = _bundle(version=None)
    save_bundle(tmp_path / "g.npz", b)
    with pytest.raises(BadInputError, match=r"g\.npz: version: the gallery records no version"):
        import_gallery(tmp_path / "g.npz", tmp_path / "g.lance")
    import_gallery(tmp_path / "g.npz", tmp_path / "g.lance", version="v1")
    assert not list(tmp_path.glob(".g.lance*"))  # created whole: no creation folder left


def test_null_values_inside_a_row_and_nan_rows_are_bad_input_naming_the_row(tmp_path):
    """A null row is a version's missing row; a null value inside a row, or NaN, is bad input."""
    inner = pa.FixedSizeListArray.from_arrays(
        pa.array([1, 2, 3, None, 5, 6, None, None], type=pa.float32()), 2,
        mask=pa.array([False, False, False, True]),
    )  # fmt: skip
    path = _table(tmp_path, {"id": ["a", "b", "c", "d"], "vec_v1": inner})
    with pytest.raises(BadInputError, match=r"t\.lance: vec_v1: null values inside row 1$"):
        open_table(path).read("vec_v1")
    nan = _vec(np.where(np.arange(12).reshape(4, 3) == 7, np.nan, X), 3)
    path = _table(tmp_path, {"id": ["a", "b", "c", "d"], "vec_v1": nan}, name="n.lance")
    with pytest.raises(BadInputError, match=r"n\.lance: vec_v1: NaN or inf \(first in row 2\)"):
        open_table(path).read("vec_v1")
    nulls = pa.FixedSizeListArray.from_arrays(
        pa.array([1, 2, None, None], type=pa.float32()), 2, mask=pa.array([False, True])
    )
    path = _table(tmp_path, {"id": ["a", "b"], "vec_v1": nulls}, name="ok.lance")
    x, ok = open_table(path).read("vec_v1")  # a null row's null values are no error
    assert ok.tolist() == [True, False] and x.tolist() == [[1, 2], [0, 0]]
