"""``compat adapt``, ``compat embed`` and ``compat score --query-adapter`` through typer's
runner, each with its exit code, bad input included."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from tests.conftest import tiny_folder_split
from tests.maps.conftest import drifted_pairs, write_npz

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    new, old, labels, _ = drifted_pairs(n=900, old_noise=1.5, new_noise=0.5)
    ids = [f"item{i:04d}" for i in range(len(new))]
    order = np.random.default_rng(0).permutation(len(new))  # the old file in another order
    return {
        "new": write_npz(root / "new.npz", new, labels, ids),
        "old": write_npz(root / "old.npz", old[order], labels[order], [ids[i] for i in order]),
        "noise": write_npz(
            root / "noise.npz", np.random.default_rng(1).standard_normal(new.shape), labels, ids
        ),
        "other": write_npz(root / "other.npz", new, labels, [f"x{i}" for i in range(len(new))]),
        "root": root,
    }


def _adapt(files, out, *extra, new="new", old="old"):
    return runner.invoke(
        app, ["adapt", "--new", files[new], "--old", files[old], "--out", str(out), *extra]
    )


@pytest.mark.parametrize("kind", ["procrustes", "affine"])
def test_adapt_writes_a_kept_adapter_and_prints_both_numbers(tmp_path, files, kind):
    r = _adapt(files, tmp_path / "a", "--kind", kind)
    assert r.exit_code == 0, r.output
    assert "with the adapter" in r.stdout and "old-self" in r.stdout and "kept" in r.stdout
    card = json.loads((tmp_path / "a" / "card.json").read_text())
    assert card["kind"] == kind and card["data"]["num_pairs"] == 900 and "refused" not in card
    assert card["data"]["source"]["file"] == files["new"]


def test_adapt_json_and_parameters(tmp_path, files):
    r = _adapt(files, tmp_path / "a", "--kind", "affine", "--param", "rank=8",
               "--param", "ridge=0.01", "--json")  # fmt: skip
    card = json.loads(r.stdout)
    assert card["params"]["rank"] == 8 and card["params"]["ridge"] == 0.01
    # rank 8 of a 32-d rotation loses too much: refused (7), the card says why
    assert r.exit_code == 7 and card["refused"]["mapped"] < card["refused"]["baseline"]


def test_adapt_residual_mlp(tmp_path, files):
    r = _adapt(files, tmp_path / "a", "--kind", "residual-mlp", "--param", "epochs=2",
               "--param", "hidden=16", "--param", "device=cpu", "--allow-refused")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "a" / "card.json").read_text())["params"]["hidden"] == 16


def test_adapt_refuses_a_useless_adapter_exit_7(tmp_path, files):
    r = _adapt(files, tmp_path / "a", "--kind", "affine", new="noise")
    assert r.exit_code == 7, r.output
    assert "refused: held-out top-1" in r.stdout and "exit 7" in r.stdout
    assert json.loads((tmp_path / "a" / "card.json").read_text())["refused"]["reason"]
    r = _adapt(files, tmp_path / "a", "--kind", "affine", "--allow-refused", new="noise")
    assert r.exit_code == 0, r.output


def test_adapt_in_other_formats_and_without_labels(tmp_path, files):
    from compat.embeddings.bundle import load_bundle
    from compat.maps.versions import write_embeddings

    new = load_bundle(files["new"])
    old = load_bundle(files["old"])
    write_embeddings(tmp_path / "new.npy", new)
    write_embeddings(tmp_path / "old_parquet", old)
    r = runner.invoke(app, ["adapt", "--new", str(tmp_path / "new.npy"), "--old",
                            str(tmp_path / "old_parquet"), "--kind", "procrustes", "--out",
                            str(tmp_path / "a"), "--no-labels", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    held = json.loads(r.stdout)["heldout"]
    assert held["retrieval"] == "pair" and held["split"] == "rows"


def test_adapt_bad_input(tmp_path, files):
    r = _adapt(files, tmp_path / "a", "--kind", "procrustes", old="other")
    assert r.exit_code == 4 and "ids: 0 of its 900 rows" in r.stderr
    assert files["new"] in r.stderr or files["other"] in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["adapt", "--new", str(tmp_path / "missing.npz"), "--old",
                            files["old"], "--kind", "affine", "--out", str(tmp_path / "a")])  # fmt: skip
    assert r.exit_code == 3 and "missing.npz" in r.stderr
    r = _adapt(files, tmp_path / "a", "--kind", "rotation")
    assert r.exit_code == 2 and "unknown map kind 'rotation'" in r.stderr
    r = _adapt(files, tmp_path / "a", "--kind", "affine", "--param", "rdige=1")
    assert r.exit_code == 2 and "rdige: unknown parameter" in r.stderr
    r = _adapt(files, tmp_path / "a", "--kind", "affine", "--val-fraction", "1.5")
    assert r.exit_code == 2 and "--val-fraction" in r.stderr
    r = runner.invoke(app, ["adapt", "--new", files["new"], "--kind", "affine", "--out", "x"])
    assert r.exit_code == 2 and "--new FILE --old FILE" in r.stderr
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    r = _adapt(files, tmp_path / "busy", "--kind", "affine")
    assert r.exit_code == 2 and "not a map's" in r.stderr
    lab = np.load(files["old"])
    write_npz(tmp_path / "relabelled.npz", lab["embeddings"], lab["labels"] + 1, lab["ids"])
    r = runner.invoke(app, ["adapt", "--new", files["new"], "--old",
                            str(tmp_path / "relabelled.npz"), "--kind", "affine", "--out",
                            str(tmp_path / "b")])  # fmt: skip
    assert r.exit_code == 4 and "relabelled.npz: labels:" in r.stderr


def test_score_with_a_query_adapter(tmp_path, files):
    assert _adapt(files, tmp_path / "a", "--kind", "procrustes").exit_code == 0
    base = ["score", "-q", files["new"], "-g", files["old"], "-p", "identification", "--json"]
    plain = runner.invoke(app, base)
    assert plain.exit_code == 0, plain.output
    adapted = runner.invoke(app, [*base, "--query-adapter", str(tmp_path / "a")])
    assert adapted.exit_code == 0, adapted.output
    top1 = [json.loads(r.stdout)["protocols"]["identification"]["metrics"]["top1"]
            for r in (plain, adapted)]  # fmt: skip
    assert top1[1] > top1[0] + 0.5
    out = json.loads(adapted.stdout)
    assert out["query_adapter"]["kind"] == "procrustes" and out["notes"]
    # refused: 7 unless allowed; a changed weight: 4; missing: 3; a wrong width: 4
    assert _adapt(files, tmp_path / "r", "--kind", "affine", new="noise").exit_code == 7
    r = runner.invoke(app, [*base, "--query-adapter", str(tmp_path / "r")])
    assert r.exit_code == 7 and "refused" in r.stderr
    r = runner.invoke(app, [*base, "--query-adapter", str(tmp_path / "r"), "--allow-refused"])
    assert r.exit_code == 0, r.output
    w = tmp_path / "a" / "weights.safetensors"
    w.write_bytes(w.read_bytes()[:-1] + b"\0")
    r = runner.invoke(app, [*base, "--query-adapter", str(tmp_path / "a")])
    assert r.exit_code == 4 and "sha256" in r.stderr
    r = runner.invoke(app, [*base, "--query-adapter", str(tmp_path / "none")])
    assert r.exit_code == 3
    write_npz(tmp_path / "narrow.npz", np.ones((4, 8)), [0, 0, 1, 1])
    assert _adapt(files, tmp_path / "c", "--kind", "procrustes").exit_code == 0
    r = runner.invoke(app, ["score", "-q", str(tmp_path / "narrow.npz"), "-g", files["old"],
                            "--query-adapter", str(tmp_path / "c")])  # fmt: skip
    assert r.exit_code == 4 and "in_dim" in r.stderr


def _project(root: Path) -> None:
    """A folder source of 24 tiny images, splits/v2.json, models/v1 (dim 6) and v2 (dim 8)."""
    import torch

    from compat.models.embedding import build_embedding_model
    from compat.models.version import save_version

    tiny_folder_split(root, 24, 4)
    for seed, (version, dim) in enumerate([("v1", 6), ("v2", 8)]):
        torch.manual_seed(seed)
        model = build_embedding_model("tiny", dim, in_channels=1, image_size=8)
        save_version(root / "models" / version, model, None,
                     {"version": version, "backbone": "tiny", "dim": dim, "in_channels": 1,
                      "image_size": 8, "pooling": "avg"})  # fmt: skip


def test_embed_through_the_cache_in_every_format(in_tmp):
    from compat.embeddings.reader import load_gallery

    _project(in_tmp)
    r = runner.invoke(app, ["embed", "v2", "--split", "v2", "--out", "v2.npz"])
    assert r.exit_code == 0, r.output
    assert "embed: v2: 24/24 images" in r.stderr and "embedded (24, 8)" in r.stderr
    b = load_gallery(in_tmp / "v2.npz")
    assert b.embeddings.shape == (24, 8) and b.version == "v2" and len(b.ids) == 24
    assert b.meta["classes"] == ["c0", "c1", "c2", "c3"]
    for out in ("v2.npy", "v2_parquet"):
        r = runner.invoke(app, ["embed", "v2", "--split", "v2", "--out", out])
        assert r.exit_code == 0, r.output
        assert "cached (24, 8)" in r.stderr  # the cache served it
        again = load_gallery(in_tmp / out)
        assert np.array_equal(again.embeddings, b.embeddings) and list(again.ids) == b.ids
    r = runner.invoke(app, ["embed", "v1", "--folder", "imgs", "--out", "v1.npz", "--quiet"])
    assert r.exit_code == 0, r.output
    assert load_gallery(in_tmp / "v1.npz").embeddings.shape == (24, 6)


def test_embed_into_a_table_then_its_next_version_column(in_tmp):
    """``compat embed VERSION --out <folder>/<name>.lance``: a new table, then another
    version's column of the same items filled by id (the re-embedding path of a backfill)."""
    import lancedb

    from compat.embeddings.reader import load_gallery
    from compat.embeddings.table import open_table

    _project(in_tmp)
    r = runner.invoke(app, ["embed", "v1", "--split", "v2", "--out", "db/g.lance", "--quiet"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().endswith("wrote vec_v1 of db/g.lance")
    r = runner.invoke(app, ["embed", "v2", "--split", "v2", "--out", "db/g.lance", "--quiet"])
    assert r.exit_code == 0, r.output
    t = open_table("db/g.lance")
    assert list(t.vectors) == ["vec_v1", "vec_v2"] and t.meta["classes"] == ["c0", "c1", "c2", "c3"]
    [source] = t.vectors["vec_v2"].sources
    assert source["kind"] == "embedded" and source["items"] == "split:v2"
    assert t.vectors["vec_v2"].weights_sha256 == source["weights_sha256"] is not None
    rows = lancedb.connect("db").open_table("g").to_arrow()
    assert rows.column_names == ["id", "label", "vec_v1", "vec_v2"] and rows.num_rows == 24
    runner.invoke(app, ["embed", "v2", "--split", "v2", "--out", "v2.npz", "--quiet"])
    x, ok = t.read("vec_v2")
    assert ok.all() and np.array_equal(x, load_gallery("v2.npz").embeddings)
    r = runner.invoke(app, ["embed", "..", "--split", "v2", "--out", "db/g.lance"])
    assert r.exit_code == 2 and "VERSION '..'" in r.stderr


def test_embed_errors(in_tmp):
    _project(in_tmp)
    r = runner.invoke(app, ["embed", "v2", "--out", "x.npz"])
    assert r.exit_code == 2 and "exactly one of --split" in r.stderr
    r = runner.invoke(app, ["embed", "v2", "--split", "nope", "--out", "x.npz"])
    assert r.exit_code == 3 and "splits/nope.json" in r.stderr
    r = runner.invoke(app, ["embed", "v9", "--split", "v2", "--out", "x.npz"])
    assert r.exit_code == 3 and "v9" in r.stderr
    r = runner.invoke(app, ["embed", "v2", "--split", "v2", "--out", "x.txt"])
    assert r.exit_code == 2 and "unknown gallery format" in r.stderr


def test_adapt_from_versions_through_the_cache(in_tmp):
    _project(in_tmp)
    r = runner.invoke(app, ["adapt", "--new-version", "v2", "--old-version", "v1", "--split",
                            "v2", "--kind", "affine", "--out", "ad", "--val-fraction", "0.5",
                            "--allow-refused", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    card = json.loads(r.stdout)
    assert (card["from"], card["to"], card["in_dim"], card["out_dim"]) == ("v2", "v1", 8, 6)
    assert card["data"]["source"]["version"] == "v2" and card["data"]["labelled"]
    # --check-split: a held-out manifest both versions embed, the map checked there (here the
    # training items again: a wiring check of the option, not of held-out classes)
    from compat.data.split import load_train_manifest
    from tests.stages.test_adapt_stage import _validation

    _validation(in_tmp, load_train_manifest(in_tmp / "splits" / "v2.json"))
    r = runner.invoke(app, ["adapt", "--new-version", "v2", "--old-version", "v1", "--split",
                            "v2", "--kind", "affine", "--out", "ad", "--check-split",
                            "validation", "--allow-refused", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)["verdict"]
    assert v["set"] == "split:validation" and v["queries"] == 12


def test_a_gallery_map_between_two_files_backfills_a_stored_gallery(tmp_path, files):
    """Issue 27 item 3: psi fitted between any two embedding files (here an outside model's)
    upgrades a stored gallery through compat backfill --psi, row for row as the map applies."""
    from compat.embeddings.bundle import EmbeddingBundle, load_bundle, save_bundle
    from compat.maps import load_map

    new, old, labels, _ = drifted_pairs(n=900, old_noise=1.5, new_noise=0.5)
    v1, v2 = (
        write_npz(tmp_path / "v1.npz", old, labels),
        write_npz(tmp_path / "v2.npz", new, labels),
    )
    r = runner.invoke(app, ["adapt", "--new", v2, "--old", v1, "--kind", "procrustes",
                            "--role", "gallery-map", "--out", str(tmp_path / "psi")])  # fmt: skip
    assert r.exit_code == 0, r.output
    card = json.loads((tmp_path / "psi" / "card.json").read_text())
    assert (card["role"], card["from"], card["to"]) == ("gallery-map", "v1", "v2")

    stored = old[:50]
    save_bundle(tmp_path / "g.npz", EmbeddingBundle(stored, labels[:50], version="v1"))
    args = ["backfill", "--gallery", str(tmp_path / "g.npz"), "--from", "v1", "--to", "v2",
            "--psi", str(tmp_path / "psi"), "--out", str(tmp_path / "up.npz"), "--no-progress"]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    up = load_bundle(tmp_path / "up.npz")
    assert np.array_equal(up.embeddings, load_map(tmp_path / "psi").apply(stored))
    assert set(up.row_versions) == {"v2"}

    # a query adapter is not a gallery map; a map of other versions is not this backfill's
    r = _adapt(files, tmp_path / "qa", "--kind", "procrustes")
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app, [*args[:7], "--psi", str(tmp_path / "qa"), "--out", str(tmp_path / "x.npz")]
    )
    assert r.exit_code == 4 and "role: a query-adapter maps queries" in r.output
    r = runner.invoke(app, ["adapt", "--new", v2, "--old", v1, "--kind", "procrustes",
                            "--role", "psi", "--out", str(tmp_path / "y")])  # fmt: skip
    assert r.exit_code == 2 and "--role 'psi'" in r.output


def test_adapt_a_query_blend_checked_on_a_check_set(tmp_path):
    """Issue 42 items 1 and 3: ``--role query-blend`` fits a blend (its weight printed and in
    the card); with ``--check-new``/``--check-old`` (both models' rows of held-out classes) the
    map is checked there as the gate judges, and that check decides: a check set where the new
    model's rows are noise refuses what the held-out classes alone would keep (exit 7)."""
    from compat.maps import load_map

    new, old, labels, _ = drifted_pairs(n=4000, classes=200, old_noise=2.5, new_noise=2.0)
    fit, held = labels < 150, labels >= 150
    ids = np.asarray([f"i{k}" for k in range(len(new))])
    paths = {
        name: write_npz(tmp_path / f"{name}.npz", rows[mask], labels[mask], ids[mask])
        for name, rows, mask in (
            ("new", new, fit), ("old", old, fit), ("check_new", new, held),
            ("check_old", old, held),
        )
    }  # fmt: skip
    noise = np.random.default_rng(4).standard_normal((int(held.sum()), new.shape[1]))
    paths["noise"] = write_npz(tmp_path / "noise.npz", noise, labels[held], ids[held])
    base = ["adapt", "--new", paths["new"], "--old", paths["old"], "--kind", "procrustes"]
    r = runner.invoke(app, [*base, "--role", "query-blend", "--out", str(tmp_path / "b"),
                            "--check-new", paths["check_new"], "--check-old", paths["check_old"]])  # fmt: skip
    assert r.exit_code == 0, r.output
    card = load_map(tmp_path / "b").card
    assert card.role == "query-blend" and f"blend weight {card.blend.weight:g}" in r.stdout
    v = card.verdict
    assert v.set == "check_new.npz and check_old.npz (half 2 of its classes)"
    assert v.lower_bound > 0 and card.blend.set.endswith("(half 1 of its classes)")
    assert f"as the gate judges: top-1 {v.served:.4f} served, {v.old_self:.4f}" in r.stdout
    r = runner.invoke(app, [*base, "--out", str(tmp_path / "a"), "--check-new", paths["noise"],
                            "--check-old", paths["check_old"]])  # fmt: skip
    assert r.exit_code == 7, r.output
    assert "on noise.npz and check_old.npz (classes no model was trained on)" in r.stdout
    for bad, words in (
        (["--blend-weight", "0.5"], "--blend-weight: only with --role query-blend"),
        (["--check-new", paths["check_new"]], "give a check set as"),
        (["--check-split", "validation"], "with --new-version and --old-version"),
    ):
        r = runner.invoke(app, [*base, "--out", str(tmp_path / "c"), *bad])
        assert r.exit_code == 2 and words in r.stderr, r.output
