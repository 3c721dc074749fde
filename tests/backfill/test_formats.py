"""The streaming backfill over every gallery format: row for row what the in-memory path
(psi over the whole matrix at once) gives, the same whatever the input and output formats."""

from __future__ import annotations

import numpy as np
import pytest

from compat.backfill.apply import backfill
from compat.backfill.resume import work_dir_for
from compat.embeddings.bundle import Sidecar, save_sidecar
from compat.embeddings.formats import sidecar_of, write_shard
from compat.embeddings.reader import GalleryReader, load_gallery
from compat.errors import BadInputError, UsageError
from compat.maps.psi import upgrade_array
from compat.models.rowblocks import ROW_BLOCK


def _as(fmt, root, bundle, name="g"):
    """The gallery ``bundle`` written in format ``fmt``; returns its path."""
    if fmt == "npz":
        return root / f"{name}.npz"  # written by the fixture
    ids = np.asarray(bundle.ids)
    if fmt == "npy":
        p = root / f"{name}.npy"
        np.save(p, bundle.embeddings)
        save_sidecar(sidecar_of(p), Sidecar(bundle.labels, ids, None, "v1", "f" * 16, {}))
        return p
    folder = root / name
    folder.mkdir()
    for s in range(0, len(bundle), 17):  # shards of 17 rows: blocks straddle shards
        sl = slice(s, s + 17)
        write_shard(folder / f"part-{s:04d}.parquet", ids[sl], bundle.embeddings[sl],
                    bundle.labels[sl], np.full(len(ids[sl]), "v1"))  # fmt: skip
    return folder


def _out(fmt, root, name):
    return root / {"npz": f"{name}.npz", "npy": f"{name}.npy", "parquet": name}[fmt]


@pytest.mark.parametrize("src", ["npz", "npy", "parquet"])
@pytest.mark.parametrize("dst", ["npz", "npy", "parquet"])
def test_every_format_pair_equals_the_in_memory_path(psi_and_gallery, src, dst):
    root, psi, _, before = psi_and_gallery
    gallery = _as(src, root, before)
    out = _out(dst, root, "up")
    res = backfill(gallery, out, source="v1", target="v2",
                   psi_dir=root / "models" / "v2" / "upgrade", batch_size=16, progress=False)  # fmt: skip
    assert (res.total, res.upgraded, res.batches) == (50, 50, 4)
    got = load_gallery(out)
    np.testing.assert_array_equal(got.embeddings, upgrade_array(psi, before.embeddings))
    assert got.labels.tolist() == before.labels.tolist() and got.ids == before.ids
    assert got.version == "v2" and got.row_versions == ["v2"] * 50
    assert got.meta["backfill"][0]["upgraded"] == 50
    assert not work_dir_for(out).exists()


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_partial_backfill_streams_the_same_rows(psi_and_gallery, fmt):
    root, psi, _, before = psi_and_gallery
    gallery = _as(fmt, root, before)
    kw = {"source": "v1", "target": "v2", "psi_dir": root / "models" / "v2" / "upgrade",
          "fraction": 0.4, "order": "random", "seed": 3, "progress": False}  # fmt: skip
    backfill(root / "g.npz", root / "ref.npz", batch_size=50, **kw)
    backfill(gallery, _out(fmt, root, "up"), batch_size=8, **kw)
    ref, got = load_gallery(root / "ref.npz"), load_gallery(_out(fmt, root, "up"))
    assert got.row_versions == ref.row_versions and got.row_versions.count("v2") == 20
    np.testing.assert_array_equal(got.embeddings, ref.embeddings)
    up = np.array([v == "v2" for v in got.row_versions])
    np.testing.assert_array_equal(got.embeddings[~up], before.embeddings[~up])
    # and on to 100% from the mixed gallery, in the same format
    backfill(_out(fmt, root, "up"), _out(fmt, root, "full"), batch_size=7,
             **{**kw, "fraction": 1.0})  # fmt: skip
    full = GalleryReader(_out(fmt, root, "full"))
    assert full.version == "v2" and len(full.meta["backfill"]) == 2
    # batches of 7 leave a one-row last block: the same bits (fixed row blocks)
    np.testing.assert_array_equal(
        load_gallery(_out(fmt, root, "full")).embeddings, upgrade_array(psi, before.embeddings)
    )


# 515 rows = two fixed row blocks (ROW_BLOCK 256) and 3 rows; each batch size leaves a last
# batch of 1, 2 or 3 rows, and 128 puts batch edges inside the fixed blocks.
@pytest.mark.parametrize("batch_size", [257, 171, 128])
@pytest.mark.parametrize("dst", ["npz", "npy", "parquet"])
def test_any_batch_size_gives_the_bits_of_the_in_memory_path(tmp_path, kit, batch_size, dst):
    assert ROW_BLOCK == 256
    psi, _ = kit.make_psi(tmp_path / "psi", in_dim=16, out_dim=16, hidden=64)
    before = kit.make_gallery(tmp_path / "g.npz", n=515, d=16, seed=1)
    assert 515 % batch_size in (1, 2, 3)
    out = _out(dst, tmp_path, "up")
    res = backfill(tmp_path / "g.npz", out, source="v1", target="v2", psi_dir=tmp_path / "psi",
                   batch_size=batch_size, progress=False)  # fmt: skip
    assert res.upgraded == 515
    want = upgrade_array(psi, before.embeddings)
    np.testing.assert_array_equal(load_gallery(out).embeddings, want)
    # a partial backfill in the same batches upgrades its rows to the same bits
    part = _out(dst, tmp_path, "part")
    backfill(tmp_path / "g.npz", part, source="v1", target="v2", psi_dir=tmp_path / "psi",
             batch_size=batch_size, fraction=0.3, order="random", seed=2, progress=False)  # fmt: skip
    got = load_gallery(part)
    up = np.array([v == "v2" for v in got.row_versions])
    np.testing.assert_array_equal(got.embeddings[up], want[up])
    np.testing.assert_array_equal(got.embeddings[~up], before.embeddings[~up])


def test_parquet_output_replaces_an_older_backfill_output_whole(psi_and_gallery):
    root = psi_and_gallery[0]
    out = root / "up"
    kw = {"source": "v1", "target": "v2", "psi_dir": root / "models" / "v2" / "upgrade",
          "progress": False}  # fmt: skip
    backfill(root / "g.npz", out, batch_size=10, **kw)  # 5 shards
    assert len(list(out.glob("batch-*.parquet"))) == 5
    backfill(root / "g.npz", out, batch_size=20, **kw)  # replaces them with 3
    assert sorted(p.name for p in out.iterdir()) == [
        "_compat.json", "batch-000000.parquet", "batch-000001.parquet", "batch-000002.parquet"
    ]  # fmt: skip
    assert not list(root.glob(".up*"))


def test_npz_output_of_a_gallery_without_labels_is_refused(psi_and_gallery):
    root, _, _, before = psi_and_gallery
    np.save(root / "bare.npy", before.embeddings)
    with pytest.raises(BadInputError, match=r"bare\.npy: labels: an \.npz output needs labels"):
        backfill(root / "bare.npy", root / "o.npz", source="v1", target="v2", assume_from=True,
                 psi_dir=root / "models" / "v2" / "upgrade", progress=False)  # fmt: skip
    # to .npy it works, and the row numbers stand in for ids in Parquet
    backfill(root / "bare.npy", root / "o", source="v1", target="v2", assume_from=True,
             psi_dir=root / "models" / "v2" / "upgrade", progress=False)  # fmt: skip
    assert GalleryReader(root / "o").ids.tolist()[:3] == ["0", "1", "2"]


@pytest.mark.parametrize("where", ["under_file", "proc", "dir_for_file", "file_for_dir"])
def test_unwritable_out_is_a_usage_error_before_any_work(psi_and_gallery, where):
    root, _, _, _ = psi_and_gallery
    (root / "afile").write_text("x")
    (root / "adir.npz").mkdir()
    out = {
        "under_file": root / "afile" / "g2.npz",
        "proc": __import__("pathlib").Path("/proc/compat-test/g2.npz"),
        "dir_for_file": root / "adir.npz",
        "file_for_dir": root / "afile",
    }[where]
    with pytest.raises(UsageError, match=r"^--out "):
        backfill(root / "g.npz", out, source="v1", target="v2",
                 psi_dir=root / "models" / "v2" / "upgrade", progress=False)  # fmt: skip
