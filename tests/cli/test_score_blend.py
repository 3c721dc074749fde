"""``compat score --query-adapter DIR --old-query FILE`` serving a query blend (issue 42): the
served queries are slerp(old, adapt(new), w) as the gate serves them, the old model's rows
matched by id or row for row, on a file gallery and on a LanceDB table gallery (one version, or
partially backfilled), and each refusal with its exit code, through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.bundle import EmbeddingBundle
from compat.embeddings.mixed import GroupStats, calibrated_two_spaces
from compat.embeddings.table_write import write_table_embeddings
from compat.evaluate.protocols import create_protocols, evaluate_sets
from compat.maps import fit_map, load_map, save_map
from compat.maps.blend import slerp
from tests.maps.conftest import drifted_pairs, unit, write_npz

runner = CliRunner()
WEIGHT = 0.4


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    """A procrustes blend (weight 0.4) and a plain adapter fitted on 600 pairs; queries: the new
    model's rows of 200 items, the old model's rows of the same items (shuffled, with ids, no
    labels), gallery: the old model's rows of 300 other items."""
    root = tmp_path_factory.mktemp("blend")
    new, old, labels, _ = drifted_pairs(n=1100, classes=30, old_noise=1.5, new_noise=0.8)
    fit = slice(0, 600)
    m = fit_map("procrustes", new[fit], old[fit], labels=labels[fit].tolist(),
                role="query-blend", blend={"weight": WEIGHT})  # fmt: skip
    save_map(root / "blend", m)
    a = fit_map("procrustes", new[fit], old[fit], labels=labels[fit].tolist())
    save_map(root / "adapter", a)
    q, g = np.arange(600, 800), np.arange(800, 1100)
    ids = [f"q{i:04d}" for i in q]
    order = np.random.default_rng(3).permutation(len(q))
    return {
        "root": root,
        "query": write_npz(root / "query.npz", new[q], labels[q], ids),
        "gallery": write_npz(root / "gallery.npz", old[g], labels[g], [f"g{i:04d}" for i in g]),
        "old_by_id": write_npz(root / "old_by_id.npz", old[q][order], ids=[ids[i] for i in order]),
        "old_in_order": write_npz(root / "old_in_order.npz", old[q]),
        "old_shuffled": write_npz(root / "old_shuffled.npz", old[q][order]),
        "new": new[q], "old": old[q], "labels": labels[q], "g": old[g], "g_labels": labels[g],
    }  # fmt: skip


def _score(files, *extra: str, adapter: str = "blend", as_json: bool = True):
    args = ["score", "-q", files["query"], "-g", files["gallery"], "-p", "identification",
            "--query-adapter", str(files["root"] / adapter), *extra]  # fmt: skip
    return runner.invoke(app, [*args, "--json"] if as_json else args)


def _top1(out: str) -> float:
    return json.loads(out)["protocols"]["identification"]["metrics"]["top1"]


def _top1_by_hand(queries: np.ndarray, labels, gallery: np.ndarray, g_labels) -> float:
    """Top-1 of cosine search, in numpy: the reference the command's fast path must equal."""
    best = np.argmax(unit(queries) @ unit(gallery).T, axis=1)
    return float(np.mean(np.asarray(g_labels)[best] == np.asarray(labels)))


def test_score_serves_the_blend_as_slerp_computed_by_hand(blend):
    r = _score(blend, "--old-query", blend["old_by_id"])
    assert r.exit_code == 0, r.output
    m = load_map(blend["root"] / "blend")
    assert m.card.blend.weight == WEIGHT
    by_hand = slerp(blend["old"], m.apply(blend["new"]), WEIGHT)
    want = _top1_by_hand(by_hand, blend["labels"], blend["g"], blend["g_labels"])
    assert _top1(r.stdout) == pytest.approx(want, abs=1e-9)
    adapted = _top1_by_hand(m.apply(blend["new"]), blend["labels"], blend["g"], blend["g_labels"])
    assert want != adapted  # the old model's rows changed the ranking: the blend was served
    out = json.loads(r.stdout)
    qa = out["query_adapter"]
    assert qa["role"] == "query-blend" and qa["blend_weight"] == WEIGHT
    assert qa["path"] == str(blend["root"] / "blend") and qa["kind"] == "procrustes"
    assert any("blended (weight 0.4)" in note for note in out["notes"])
    human = _score(blend, "--old-query", blend["old_by_id"], as_json=False)
    assert human.exit_code == 0, human.output
    assert "note: queries blended (weight 0.4)" in human.stderr


def test_old_rows_match_by_id_else_row_for_row(blend):
    by_id = _score(blend, "--old-query", blend["old_by_id"])
    in_order = _score(blend, "--old-query", blend["old_in_order"])  # no ids: row order
    shuffled = _score(blend, "--old-query", blend["old_shuffled"])  # no ids, other order
    assert by_id.exit_code == in_order.exit_code == shuffled.exit_code == 0, shuffled.output
    assert _top1(by_id.stdout) == _top1(in_order.stdout)
    assert _top1(shuffled.stdout) < _top1(by_id.stdout)  # matched in order, wrongly: worse


def test_a_blend_and_old_query_go_together_exit_2(blend):
    r = _score(blend, as_json=False)
    assert r.exit_code == 2 and "needs the old model's embeddings of the queries" in r.stderr
    assert "--old-query" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _score(blend, "--old-query", blend["old_by_id"], adapter="adapter")
    assert r.exit_code == 2 and "--old-query: only goes with a query-blend map" in r.stderr
    r = runner.invoke(app, ["score", "-q", blend["query"], "-g", blend["gallery"],
                            "--old-query", blend["old_by_id"]])  # fmt: skip
    assert r.exit_code == 2 and "only goes with a query-blend map" in r.stderr


def test_old_query_bad_input_exit_4_and_missing_exit_3(blend, tmp_path):
    ids = [f"q{i:04d}" for i in range(600, 800)]
    short = write_npz(tmp_path / "short.npz", blend["old"][1:], ids=ids[1:])
    r = _score(blend, "--old-query", short)
    assert r.exit_code == 4 and "short.npz" in r.stderr and "'q0600'" in r.stderr
    fewer = write_npz(tmp_path / "fewer.npz", blend["old"][:150])
    r = _score(blend, "--old-query", fewer)
    assert r.exit_code == 4 and "fewer.npz" in r.stderr
    assert "150 rows" in r.stderr and "200 queries" in r.stderr
    narrow = write_npz(tmp_path / "narrow.npz", blend["old"][:, :16], ids=ids)
    r = _score(blend, "--old-query", narrow)
    assert r.exit_code == 4 and "narrow.npz" in r.stderr
    assert "16-dim" in r.stderr and "32-dim" in r.stderr
    twice = write_npz(tmp_path / "twice.npz", blend["old"], ids=[ids[0], *ids[:-1]])
    r = _score(blend, "--old-query", twice)
    assert r.exit_code == 4 and "twice.npz: ids: 'q0600' names rows 0 and 1" in r.stderr
    r = _score(blend, "--old-query", str(tmp_path / "none.npz"))
    assert r.exit_code == 3 and "none.npz" in r.stderr


def test_a_blend_is_refused_and_its_weights_checked_as_an_adapter(blend, tmp_path):
    new, old, labels, _ = drifted_pairs(n=600, classes=30)
    noise = np.random.default_rng(5).standard_normal(new.shape)
    refused = fit_map("procrustes", noise, old, labels=labels.tolist(), role="query-blend",
                      blend={"weight": 1.0})  # fmt: skip
    assert refused.refused is not None
    save_map(blend["root"] / "refused", refused)
    r = _score(blend, "--old-query", blend["old_by_id"], adapter="refused")
    assert r.exit_code == 7 and "refused" in r.stderr
    r = _score(blend, "--old-query", blend["old_by_id"], "--allow-refused", adapter="refused")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["query_adapter"]["refused"]
    save_map(tmp_path / "changed", load_map(blend["root"] / "blend"))
    w = tmp_path / "changed" / "weights.safetensors"
    w.write_bytes(w.read_bytes()[:-1] + b"\0")
    r = runner.invoke(app, ["score", "-q", blend["query"], "-g", blend["gallery"],
                            "--query-adapter", str(tmp_path / "changed"),
                            "--old-query", blend["old_by_id"]])  # fmt: skip
    assert r.exit_code == 4 and "sha256" in r.stderr


def _table(path: Path, emb, labels, ids, version: str) -> Path:
    """A version's rows as a LanceDB table (a new one, or that column filled by id)."""
    write_table_embeddings(path, EmbeddingBundle(emb, labels, ids=list(ids), version=version))
    return path


def _score_json(files, gallery, old_query, *extra: str):
    r = runner.invoke(app, ["score", "-q", files["query"], "-g", str(gallery), "-p",
                            "identification", "--query-adapter", str(files["root"] / "blend"),
                            "--old-query", str(old_query), "--json", "--device", "cpu",
                            *extra])  # fmt: skip
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_a_table_gallery_of_the_old_rows_scores_the_blend_as_the_file_gallery(blend, tmp_path):
    """The blend's `to` is the table's only version: its queries search that column, exactly as
    the .npz gallery of the same rows (the fast path, the reference) is searched."""
    g_ids = [f"g{i:04d}" for i in range(800, 1100)]
    table = _table(tmp_path / "g.lance", blend["g"], blend["g_labels"], g_ids, "old")
    by_file = _score_json(blend, blend["gallery"], blend["old_by_id"])
    by_table = _score_json(blend, table, blend["old_by_id"])
    metrics = by_table["protocols"]["identification"]["metrics"]
    assert metrics["top1"] == by_file["protocols"]["identification"]["metrics"]["top1"]
    for key, value in by_file["protocols"]["identification"]["metrics"].items():
        assert metrics[key] == pytest.approx(value, abs=1e-6), key
    note = by_table["notes"][0]
    assert "every row served from vec_old" in note and "blended (weight 0.4)" in note
    assert by_table["query_adapter"]["role"] == "query-blend"
    # the old model's rows of the queries as a table (as --query may be one): the same scores
    ids = [f"q{i:04d}" for i in range(600, 800)]
    old_table = _table(tmp_path / "old_q.lance", blend["old"], blend["labels"], ids, "old")
    again = _score_json(blend, table, old_table)
    assert again["protocols"]["identification"]["metrics"] == pytest.approx(metrics, abs=1e-9)
    # rows of the new version only: the blend maps into old's space, not the table's (exit 4)
    new_only = _table(tmp_path / "new.lance", blend["g"], blend["g_labels"], g_ids, "new")
    r = runner.invoke(app, ["score", "-q", blend["query"], "-g", str(new_only), "--query-adapter",
                            str(blend["root"] / "blend"), "--old-query", blend["old_by_id"]])  # fmt: skip
    assert r.exit_code == 4 and "from/to" in r.stderr and "new's" in r.stderr


def test_a_partial_table_scores_its_older_rows_with_the_blended_queries(blend, tmp_path):
    """Rows of two versions: the newer ("new") rows with the new queries, the older with the
    blend's queries (in the older space), scores matched across the two spaces: the partial-
    backfill curve's rule, the blend where an adapter's mapped queries would be."""
    new, old, labels, _ = drifted_pairs(n=1100, classes=30, old_noise=1.5, new_noise=0.8)
    assert np.array_equal(old[800:1100], blend["g"])  # the fixture's pairs, drawn again
    g_ids = [f"g{i:04d}" for i in range(800, 1100)]
    table = _table(tmp_path / "g.lance", old[800:1100], labels[800:1100], g_ids, "old")
    up = np.arange(300) % 3 == 0
    _table(table, new[800:1100][up], labels[800:1100][up],
           [i for i, u in zip(g_ids, up, strict=True) if u], "new")  # fmt: skip
    got = _score_json(blend, table, blend["old_by_id"])
    m = load_map(blend["root"] / "blend")
    blended = slerp(blend["old"], m.apply(blend["new"]), WEIGHT)
    g_r, g_o = np.zeros((300, new.shape[1]), np.float32), unit(old[800:1100])
    g_r[up] = unit(new[800:1100][up])
    stats = (GroupStats.of(g_r[up]), GroupStats.of(g_o[up]))  # the rows held in both spaces
    q, g = calibrated_two_spaces(unit(blend["new"]), unit(blended), g_r, g_o, up, stats)
    protocols = create_protocols(["identification"], max_pairs=1_000_000, seed=0)
    want = evaluate_sets(protocols, q, blend["labels"], g, labels[800:1100], device="cpu")
    got_m = got["protocols"]["identification"]["metrics"]
    for key, value in want["identification"].metrics.items():
        assert got_m[key] == pytest.approx(value, abs=1e-6), key
    note = got["notes"][0]
    assert "100 rows served from vec_new" in note and "200 from vec_old with new queries" in note
    assert "blended (weight 0.4)" in note
