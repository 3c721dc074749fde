"""``compat score --query-adapter DIR --old-query FILE`` serving a query blend (issue 42): the
served queries are slerp(old, adapt(new), w) as the gate serves them, the old model's rows
matched by id or row for row, and each refusal with its exit code, through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.maps import fit_map, load_map, save_map
from compat.maps.blend import slerp
from tests.maps.conftest import drifted_pairs, unit

runner = CliRunner()
WEIGHT = 0.4


def _npz(path: Path, emb, labels=None, ids=None) -> str:
    arrays = {"embeddings": np.asarray(emb, np.float32)}
    if labels is not None:
        arrays["labels"] = np.asarray(labels)
    if ids is not None:
        arrays["ids"] = np.asarray(ids, dtype=np.str_)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return str(path)


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
        "query": _npz(root / "query.npz", new[q], labels[q], ids),
        "gallery": _npz(root / "gallery.npz", old[g], labels[g], [f"g{i:04d}" for i in g]),
        "old_by_id": _npz(root / "old_by_id.npz", old[q][order], ids=[ids[i] for i in order]),
        "old_in_order": _npz(root / "old_in_order.npz", old[q]),
        "old_shuffled": _npz(root / "old_shuffled.npz", old[q][order]),
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
    short = _npz(tmp_path / "short.npz", blend["old"][1:], ids=ids[1:])
    r = _score(blend, "--old-query", short)
    assert r.exit_code == 4 and "short.npz" in r.stderr and "'q0600'" in r.stderr
    fewer = _npz(tmp_path / "fewer.npz", blend["old"][:150])
    r = _score(blend, "--old-query", fewer)
    assert r.exit_code == 4 and "fewer.npz" in r.stderr
    assert "150 rows" in r.stderr and "200 queries" in r.stderr
    narrow = _npz(tmp_path / "narrow.npz", blend["old"][:, :16], ids=ids)
    r = _score(blend, "--old-query", narrow)
    assert r.exit_code == 4 and "narrow.npz" in r.stderr
    assert "16-dim" in r.stderr and "32-dim" in r.stderr
    twice = _npz(tmp_path / "twice.npz", blend["old"], ids=[ids[0], *ids[:-1]])
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
