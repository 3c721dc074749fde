"""A LanceDB table gallery backfilled in place (real tables on disk): ``vec_v2`` row for row the
file backfill's bits, whatever the batch size, fraction steps or deleted rows; every other
column's files untouched; provenance in the column's metadata; bad input and a held table are
one line with their exit codes."""

from __future__ import annotations

import json

import lance
import lancedb
import numpy as np
import pytest
from typer.testing import CliRunner

import compat.embeddings.table_write as table_write
from compat.backfill.apply import backfill
from compat.backfill.table import backfill_table
from compat.cli.main import app
from compat.embeddings.reader import load_gallery
from compat.embeddings.table import open_table
from compat.embeddings.table_fill import table_lock
from compat.embeddings.table_write import export_table, import_gallery
from compat.errors import BadInputError, ConflictError
from compat.io import sha256_file

runner = CliRunner()


@pytest.fixture()
def small_fragments(monkeypatch):
    """Tables made here hold fragments of 128 rows (a real gallery's are 262,144)."""
    monkeypatch.setattr(table_write, "ROWS_PER_FRAGMENT", 128)


def _files_of(path, *columns):
    """{data file: sha256} of the files holding ``columns`` in the table's current version."""
    ds = lance.dataset(path)
    ids = {ds.lance_schema.field(c).id() for c in columns}
    out = {}
    for frag in ds.get_fragments():
        for f in frag.metadata.files:
            if ids & set(f.fields):
                out[f.path] = sha256_file(path / "data" / f.path)
    return out


def _v2(path):
    x, ok = open_table(path).read("vec_v2")
    return x, ok


def test_in_place_equals_the_file_backfill_and_rewrites_nothing_else(
    tmp_path, kit, small_fragments
):
    kit.make_psi(tmp_path / "psi", in_dim=16, out_dim=16, hidden=64)
    kit.make_gallery(tmp_path / "g.npz", n=515, d=16, seed=1)
    path = tmp_path / "db" / "g.lance"
    import_gallery(tmp_path / "g.npz", path)
    lance.dataset(path).add_columns({"note": "concat('item:', id)"})  # a payload column
    before = lance.dataset(path).to_table(columns=["id", "label", "note", "vec_v1"])
    kept = _files_of(path, "id", "label", "note", "vec_v1")
    res = backfill_table(path, source="v1", target="v2", psi_dir=tmp_path / "psi", batch_size=171)
    assert (res.upgraded, res.batches, res.column, res.written) == (515, 5, "vec_v2", True)
    backfill(tmp_path / "g.npz", tmp_path / "ref.npz", source="v1", target="v2",
             psi_dir=tmp_path / "psi", batch_size=257, progress=False)  # fmt: skip
    x, ok = _v2(path)
    assert ok.all() and np.array_equal(x, load_gallery(tmp_path / "ref.npz").embeddings)
    assert lance.dataset(path).to_table(columns=["id", "label", "note", "vec_v1"]).equals(before)
    assert _files_of(path, "id", "label", "note", "vec_v1") == kept  # the same files, same bytes
    col = open_table(path).vectors["vec_v2"]
    assert col.weights_sha256 == "b" * 64  # psi's card: the weights of v2
    [source] = col.sources
    assert source["kind"] == "map" and source["map_kind"] == "upgrade"
    assert source["path"] == str(tmp_path / "psi") and source["from_column"] == "vec_v1"
    assert source["weights_sha256"] == res.psi_weights_sha256
    # LanceDB serves it: the nearest row to an upgraded row is itself
    hit = lancedb.connect(tmp_path / "db").open_table("g").search(x[7], vector_column_name="vec_v2")
    assert hit.limit(1).to_list()[0]["id"] == "item7"
    # a second run has nothing left to do and writes nothing
    version = lance.dataset(path).version
    again = backfill_table(path, source="v1", target="v2", psi_dir=tmp_path / "psi")
    assert (again.upgraded, again.already, again.table_version) == (0, 515, None)
    assert lance.dataset(path).version == version


def test_partial_steps_equal_the_file_backfills_and_leave_the_rest_null(
    tmp_path, kit, small_fragments
):
    kit.make_psi(tmp_path / "psi", in_dim=16, out_dim=16, hidden=64)
    before = kit.make_gallery(tmp_path / "g.npz", n=515, d=16, seed=1)
    path = tmp_path / "g.lance"
    import_gallery(tmp_path / "g.npz", path)
    kw = {"source": "v1", "target": "v2", "psi_dir": tmp_path / "psi", "order": "random",
          "seed": 2}  # fmt: skip
    src, step_files = tmp_path / "g.npz", {}
    for i, f in enumerate((0.3, 0.6, 1.0)):
        backfill_table(path, fraction=f, batch_size=100, **kw)
        out = tmp_path / f"ref{i}.npz"
        backfill(src, out, fraction=f, batch_size=128, progress=False, **kw)
        ref, src = load_gallery(out), out
        x, ok = _v2(path)
        up = np.array([v == "v2" for v in ref.row_versions])
        assert ok.tolist() == up.tolist() and int(ok.sum()) == int(f * 515)
        assert np.array_equal(x[ok], ref.embeddings[ok]) and not x[~ok].any()
        v1, _ = open_table(path).read("vec_v1")
        assert np.array_equal(v1, before.embeddings)  # the old column kept whole
        step_files[f] = _files_of(path, "vec_v2")
        assert open_table(path).row_versions().tolist() == ref.row_versions
    assert len(open_table(path).vectors["vec_v2"].sources) == 1  # one map, named once


def test_deleted_rows_and_a_column_sharing_a_file(tmp_path, kit):
    """A table made elsewhere: vec_v2 partly filled in the same file as the other columns,
    and rows deleted. Rows are counted as the table reads them (deleted ones skipped)."""
    import pyarrow as pa

    kit.make_psi(tmp_path / "psi", in_dim=8, out_dim=8, hidden=16)
    g = kit.make_gallery(tmp_path / "g.npz", n=60, d=8)
    done = np.arange(60) < 10
    v2 = pa.FixedSizeListArray.from_arrays(pa.array((g.embeddings * 0.5).ravel()), 8,
                                           mask=pa.array(~done))  # fmt: skip
    v1 = pa.FixedSizeListArray.from_arrays(pa.array(g.embeddings.ravel()), 8)
    path = tmp_path / "t.lance"
    lance.write_dataset(pa.table({"id": g.ids, "label": g.labels, "vec_v1": v1, "vec_v2": v2}),
                        path, max_rows_per_file=25)  # fmt: skip
    lance.dataset(path).delete("id IN ('item3', 'item30')")
    res = backfill_table(path, source="v1", target="v2", psi_dir=tmp_path / "psi", batch_size=7)
    assert (res.upgraded, res.already, res.total) == (49, 9, 58)
    export_table(path, tmp_path / "v1.npz", version="v1")
    exported = load_gallery(tmp_path / "v1.npz")
    backfill(tmp_path / "v1.npz", tmp_path / "ref.npz", source="v1", target="v2",
             psi_dir=tmp_path / "psi", progress=False)  # fmt: skip
    x, ok = _v2(path)
    assert ok.all() and np.array_equal(x[9:], load_gallery(tmp_path / "ref.npz").embeddings[9:])
    keep = np.array([i not in (3, 30) for i in range(60)])
    assert np.array_equal(x[:9], (g.embeddings * 0.5)[keep][:9])  # the rows it had, kept
    assert exported.ids == [i for i, k in zip(g.ids, keep, strict=True) if k]


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_exit_codes_of_a_table_backfill(tmp_path, kit):
    kit.make_psi(tmp_path / "psi")
    kit.make_psi(tmp_path / "wide", out_dim=12)
    kit.make_psi(tmp_path / "refused")
    card = json.loads((tmp_path / "refused" / "card.json").read_text())
    card["refused"] = {"reason": "no gain on held-out classes", "metric": "top1"}
    (tmp_path / "refused" / "card.json").write_text(json.dumps(card))
    kit.make_gallery(tmp_path / "g.npz")
    path = tmp_path / "g.lance"
    import_gallery(tmp_path / "g.npz", path)
    base = ["backfill", "--gallery", path, "--from", "v1", "--to", "v2", "--no-progress"]

    r = _cli(*base, "--psi", tmp_path / "refused")
    assert r.exit_code == 7 and "was refused" in r.stdout
    assert list(open_table(path).vectors) == ["vec_v1"]  # nothing written
    r = _cli(*base, "--psi", tmp_path / "psi", "--out", tmp_path / "x.npz")
    assert r.exit_code == 2 and "backfilled in place" in r.stderr
    r = _cli(*base[:2], tmp_path / "nope.lance", *base[3:], "--psi", tmp_path / "psi")
    assert r.exit_code == 3 and r.stderr.startswith(
        f"error: {tmp_path / 'nope.lance'}: table not found"
    )
    r = _cli("backfill", "--gallery", path, "--from", "v0", "--to", "v2", "--psi", tmp_path / "psi")
    assert r.exit_code == 4 and f"error: {path}: vec_v0: no column for --from v0" in r.stderr
    with table_lock(path):
        r = _cli(*base, "--psi", tmp_path / "psi")
        assert r.exit_code == 6 and "is writing this table" in r.stderr
    r = _cli(*base, "--psi", tmp_path / "psi", "--fraction", "0.5", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["upgraded"] == 25
    r = _cli(*base, "--psi", tmp_path / "wide")
    assert r.exit_code == 4 and f"error: {path}: vec_v2: the column holds 8-dim rows" in r.stderr
    with pytest.raises(BadInputError, match=r"in_dim: psi takes 8-dim rows"):
        kit.make_gallery(tmp_path / "g16.npz", d=16)
        import_gallery(tmp_path / "g16.npz", tmp_path / "g16.lance")
        backfill_table(tmp_path / "g16.lance", source="v1", target="v2", psi_dir=tmp_path / "psi")
    # a row in neither column was not made by --from (nor is it in --to already)
    kit.make_psi(tmp_path / "psi3", target="v3")
    kit.make_gallery(tmp_path / "mixed.npz", version=None, row_versions=["v2"] + ["v1"] * 49)
    import_gallery(tmp_path / "mixed.npz", tmp_path / "mixed.lance")
    with pytest.raises(BadInputError, match=r"vec_v1: row 0 \(id 'item0'\) has no vec_v1: it was"):
        backfill_table(tmp_path / "mixed.lance", source="v1", target="v3",
                       psi_dir=tmp_path / "psi3")  # fmt: skip
    with table_lock(path), pytest.raises(ConflictError):
        backfill_table(path, source="v1", target="v2", psi_dir=tmp_path / "psi")


def test_psi_producing_nan_is_bad_input_naming_the_table_row(tmp_path, kit, monkeypatch):
    """Both ways a batch is mapped (every row, or the rows --fraction chose) check psi's output;
    a failed run writes nothing into the table."""
    import compat.backfill.table as table_backfill

    kit.make_psi(tmp_path / "psi")
    kit.make_gallery(tmp_path / "g.npz", n=50)
    path = tmp_path / "g.lance"
    import_gallery(tmp_path / "g.npz", path)
    real = table_backfill.upgrade_rows

    def nan_at_row_7(psi, sha, device, x, start):
        y = real(psi, sha, device, x, start)
        if start <= 7 < start + len(y):
            y[7 - start, 3] = np.nan
        return y

    monkeypatch.setattr(table_backfill, "upgrade_rows", nan_at_row_7)
    kw = {"source": "v1", "target": "v2", "psi_dir": tmp_path / "psi", "batch_size": 16}
    for fraction in (1.0, 0.9):
        with pytest.raises(BadInputError, match=r"psi produced NaN or inf for table row 7$"):
            backfill_table(path, fraction=fraction, order="oldest", **kw)
        assert open_table(path).valid(["vec_v2"])["vec_v2"].sum() == 0
        assert not [p for p in (path / "data").iterdir() if p.name.startswith("compat-")]
