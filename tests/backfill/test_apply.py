"""Applying psi to a stored gallery: results, provenance, partial backfills, resuming, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from compat.backfill.apply import backfill
from compat.backfill.resume import work_dir_for
from compat.embeddings.bundle import load_bundle
from compat.errors import BadInputError, NotFoundError, UsageError
from compat.io import sha256_file
from compat.maps.psi import upgrade_array


def _run(root, **kw):
    args = {
        "source": "v1",
        "target": "v2",
        "psi_dir": root / "models" / "v2" / "upgrade",
        "batch_size": 16,
        "progress": False,
    }
    args.update(kw)
    return backfill(args.pop("gallery", root / "g.npz"), args.pop("out", root / "g2.npz"), **args)


def test_full_backfill_upgrades_every_row_and_keeps_the_input(psi_and_gallery):
    root, psi, card, before = psi_and_gallery
    digest = sha256_file(root / "g.npz")
    res = _run(root)
    assert (res.total, res.upgraded, res.remaining, res.batches) == (50, 50, 0, 4)
    out = load_bundle(root / "g2.npz")
    np.testing.assert_allclose(out.embeddings, upgrade_array(psi, before.embeddings), atol=1e-6)
    assert out.version == "v2" and out.row_versions == ["v2"] * 50
    assert out.ids == before.ids and out.labels.tolist() == before.labels.tolist()
    assert out.fingerprint == before.fingerprint
    (entry,) = out.meta["backfill"]
    assert entry["psi_weights_sha256"] == card.weights_sha256 and entry["upgraded"] == 50
    assert sha256_file(root / "g.npz") == digest  # the input is never modified
    assert not work_dir_for(root / "g2.npz").exists()


def test_partial_backfill_makes_a_mixed_gallery(psi_and_gallery):
    root, psi, _, before = psi_and_gallery
    res = _run(root, fraction=0.5, order="random", seed=7)
    assert (res.upgraded, res.remaining) == (25, 25)
    out = load_bundle(root / "g2.npz")
    assert out.version is None and out.row_versions.count("v2") == 25
    up = np.array([v == "v2" for v in out.row_versions])
    np.testing.assert_array_equal(out.embeddings[~up], before.embeddings[~up])
    np.testing.assert_allclose(
        out.embeddings[up], upgrade_array(psi, before.embeddings[up]), atol=1e-6
    )
    # continue to 100% from the mixed gallery: only the rest is upgraded
    res2 = _run(root, gallery=root / "g2.npz", out=root / "g3.npz", fraction=1.0)
    assert (res2.already, res2.upgraded, res2.remaining) == (25, 25, 0)
    full = load_bundle(root / "g3.npz")
    assert full.version == "v2" and len(full.meta["backfill"]) == 2
    np.testing.assert_allclose(full.embeddings, upgrade_array(psi, before.embeddings), atol=1e-6)


def test_interrupted_run_resumes_from_saved_batches(psi_and_gallery, monkeypatch):
    root, *_ = psi_and_gallery
    _run(root, out=root / "ref.npz")
    import compat.backfill.resume as resume_mod

    real_save, calls = np.save, []

    def dying_save(f, arr):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt  # as if killed while upgrading the third batch
        real_save(f, arr)

    monkeypatch.setattr(resume_mod.np, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        _run(root)
    monkeypatch.setattr(resume_mod.np, "save", real_save)
    work = work_dir_for(root / "g2.npz")
    assert sorted(p.name for p in work.glob("batch-*.npy")) == [
        "batch-000000.npy",
        "batch-000001.npy",
    ]
    assert not (root / "g2.npz").exists()  # nothing appears before it is complete
    res = _run(root)
    assert res.resumed_batches == 2 and res.upgraded == 50
    a, b = load_bundle(root / "ref.npz"), load_bundle(root / "g2.npz")
    np.testing.assert_array_equal(a.embeddings, b.embeddings)


def test_progress_bar_path(psi_and_gallery):
    root, *_ = psi_and_gallery
    assert _run(root, progress=True).upgraded == 50


def test_work_folder_of_another_job_is_discarded(psi_and_gallery):
    root, *_ = psi_and_gallery
    work = work_dir_for(root / "g2.npz")
    work.mkdir()
    (work / "state.json").write_text('{"job": "other"}')
    np.save(work / "batch-000000.npy", np.zeros((3, 3), np.float32))
    res = _run(root)
    assert res.resumed_batches == 0 and res.upgraded == 50


def test_refusals(psi_and_gallery, kit):
    root, *_ = psi_and_gallery
    with pytest.raises(NotFoundError):
        _run(root, gallery=root / "missing.npz")
    with pytest.raises(NotFoundError):
        _run(root, psi_dir=root / "nowhere")
    with pytest.raises(UsageError, match="is the input gallery"):
        _run(root, out=root / "g.npz")
    with pytest.raises(BadInputError, match="made by 'v1', not by --from 'v0'"):
        _run(root, source="v0")
    with pytest.raises(BadInputError, match="psi upgrades v1 -> v2, not --from v1 -> --to v3"):
        _run(root, target="v3", psi_dir=root / "models" / "v2" / "upgrade")

    kit.make_gallery(root / "wide.npz", d=12)
    with pytest.raises(BadInputError, match="psi takes 8-dim rows, the gallery's rows have 12"):
        _run(root, gallery=root / "wide.npz")

    kit.make_gallery(root / "anon.npz", version=None)
    with pytest.raises(BadInputError, match="records no version"):
        _run(root, gallery=root / "anon.npz")
    assert _run(root, gallery=root / "anon.npz", assume_from=True).upgraded == 50

    kit.make_gallery(root / "cached.npz", meta={"cache_key": {"weights_sha256": "c" * 64}})
    with pytest.raises(BadInputError, match="psi was fitted on v1 weights aaaa"):
        _run(root, gallery=root / "cached.npz")

    bundle = kit.make_gallery(root / "nan.npz")
    emb = bundle.embeddings.copy()
    emb[4, 1] = np.nan
    np.savez(root / "nan.npz", embeddings=emb, labels=bundle.labels, version="v1")
    with pytest.raises(BadInputError, match=r"NaN or inf \(first in row 4\)"):
        _run(root, gallery=root / "nan.npz")
    assert not (root / "g2.npz").exists() or load_bundle(root / "g2.npz").version == "v2"


def test_partial_backfill_into_another_width_is_refused(tmp_path, kit):
    kit.make_psi(tmp_path / "models" / "v2" / "upgrade", in_dim=8, out_dim=4)
    kit.make_gallery(tmp_path / "g.npz")
    with pytest.raises(BadInputError, match="would mix both widths"):
        _run(tmp_path, fraction=0.5)
    res = _run(tmp_path, fraction=1.0)
    assert res.upgraded == 50 and load_bundle(tmp_path / "g2.npz").dim == 4
    before = load_bundle(tmp_path / "g.npz")
    assert _run(tmp_path, out=tmp_path / "g0.npz", fraction=0.0).upgraded == 0  # a no-op copy
    same = load_bundle(tmp_path / "g0.npz")
    np.testing.assert_array_equal(same.embeddings, before.embeddings)
    assert same.version == "v1" and same.row_versions == ["v1"] * 50
