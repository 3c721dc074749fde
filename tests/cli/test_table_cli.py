"""``compat data import/export/show`` and ``compat score`` on LanceDB table galleries through
typer's runner: a partially backfilled table is scored as the partial-backfill curve scores it
(the newer rows with the newer queries, the others with the older space's, scores matched
across spaces), each command with its exit code."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.bundle import EmbeddingBundle, save_bundle
from compat.embeddings.mixed import GroupStats, calibrated_two_spaces
from compat.embeddings.table_write import write_table_embeddings
from compat.evaluate.protocols import create_protocols, evaluate_sets
from compat.models.norms import l2_normalize_rows

runner = CliRunner()


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def _unit(x):
    return l2_normalize_rows(np.asarray(x, np.float32))[0]


@pytest.fixture()
def spaces(tmp_path):
    """120 gallery items and 40 queries of 12 identities, embedded by v1 (8-dim) and v2 (8-dim,
    another space); a table with v1 for every item and v2 for a third of them."""
    rng = np.random.default_rng(0)
    centres1, centres2 = rng.standard_normal((12, 8)), rng.standard_normal((12, 8))
    g_lab, q_lab = np.arange(120) % 12, np.arange(40) % 12
    g1 = centres1[g_lab] + 0.6 * rng.standard_normal((120, 8))
    g2 = centres2[g_lab] + 0.4 * rng.standard_normal((120, 8))
    q1 = centres1[q_lab] + 0.6 * rng.standard_normal((40, 8))
    q2 = centres2[q_lab] + 0.4 * rng.standard_normal((40, 8))
    gids, qids = [f"g{i}" for i in range(120)], [f"q{i}" for i in range(40)]
    save_bundle(tmp_path / "g1.npz", EmbeddingBundle(g1, g_lab, ids=gids, version="v1"))
    r = _cli("data", "import", "--gallery", tmp_path / "g1.npz", "--out", tmp_path / "g.lance")
    assert r.exit_code == 0, r.output
    up = np.arange(120) % 3 == 0
    write_table_embeddings(tmp_path / "g.lance", EmbeddingBundle(
        g2[up], g_lab[up], ids=[i for i, u in zip(gids, up, strict=True) if u], version="v2",
    ))  # fmt: skip
    save_bundle(tmp_path / "q2.npz", EmbeddingBundle(q2, q_lab, ids=qids))
    save_bundle(tmp_path / "q1.npz", EmbeddingBundle(q1, q_lab, ids=qids, version="v1"))
    write_table_embeddings(tmp_path / "q.lance", EmbeddingBundle(q1, q_lab, ids=qids, version="v1"))
    write_table_embeddings(tmp_path / "q.lance", EmbeddingBundle(q2, q_lab, ids=qids, version="v2"))
    return {"g1": g1, "g2": g2, "q1": q1, "q2": q2, "g_lab": g_lab, "q_lab": q_lab, "up": up}


def _expected(s, q_old):
    up = s["up"]
    g_r, g_o = np.zeros((120, 8), np.float32), _unit(s["g1"])
    g_r[up] = _unit(s["g2"][up])
    stats = (GroupStats.of(g_r[up]), GroupStats.of(g_o[up]))  # the rows held in both spaces
    q, g = calibrated_two_spaces(_unit(s["q2"]), _unit(q_old), g_r, g_o, up, stats)
    protocols = create_protocols(["identification", "verification"], max_pairs=1_000_000, seed=0)
    got = evaluate_sets(protocols, q, s["q_lab"], g, s["g_lab"], device="cpu")
    return {name: r.metrics for name, r in got.items()}


def _scores(tmp_path, query):
    r = _cli("score", "-q", query, "-g", tmp_path / "g.lance", "-p", "identification",
             "-p", "verification", "--json", "--device", "cpu")  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    return {k: v["metrics"] for k, v in out["protocols"].items()}, out["notes"]


def test_a_partial_table_is_scored_as_the_partial_backfill_curve(tmp_path, spaces):
    # new queries only: the old rows are scored with them as they are (backward compatible)
    got, notes = _scores(tmp_path, tmp_path / "q2.npz")
    want = _expected(spaces, spaces["q2"])
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=1e-12)
    assert "40 rows served from vec_v2" in notes[0] and "80 from vec_v1" in notes[0]
    assert "moments of the 40 rows held in both" in notes[0]
    # a query table with both versions: the old rows with the old model's queries
    got, notes = _scores(tmp_path, tmp_path / "q.lance")
    want = _expected(spaces, spaces["q1"])
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=1e-12)
    assert f"vec_v1 of {tmp_path / 'q.lance'}" in notes[0]
    # queries of the older version alone cannot score the rows psi moved into v2
    r = _cli("score", "-q", tmp_path / "q1.npz", "-g", tmp_path / "g.lance")
    assert r.exit_code == 4 and "no v2 queries" in r.stderr


def test_import_show_export_and_their_errors(tmp_path, spaces):
    r = _cli("data", "show", tmp_path / "g.lance", "--json")
    assert r.exit_code == 0, r.output
    facts = json.loads(r.stdout)
    assert facts["rows"] == 120 and facts["columns"]["vec_v2"]["rows"] == 40
    assert facts["columns"]["vec_v1"]["sources"][0]["kind"] == "imported"
    r = _cli("data", "export", "--gallery", tmp_path / "g.lance", "--out", tmp_path / "e1",
             "--version", "v1")  # fmt: skip
    assert r.exit_code == 0 and "export: 120 x 8 vec_v1" in r.stdout
    r = _cli("data", "export", "--gallery", tmp_path / "g.lance", "--out", tmp_path / "e2.npz",
             "--version", "v2")  # fmt: skip
    assert r.exit_code == 4 and r.stderr.startswith(
        f"error: {tmp_path / 'g.lance'}: vec_v2: 80 rows are null"
    )
    r = _cli("data", "import", "--gallery", tmp_path / "e1", "--out", tmp_path / "x")
    assert r.exit_code == 2 and "ends in .lance" in r.stderr
    r = _cli("data", "import", "--gallery", tmp_path / "nope.npz", "--out", tmp_path / "x.lance")
    assert r.exit_code == 3
    r = _cli("data", "show", tmp_path / "nope.lance")
    assert r.exit_code == 3 and "table not found" in r.stderr
    r = _cli("data", "import", "--gallery", tmp_path / "g1.npz", "--out", tmp_path / "y.lance",
             "--version", "../x")  # fmt: skip
    assert r.exit_code == 2 and "--version '../x'" in r.stderr
    save_bundle(tmp_path / "dup.npz", EmbeddingBundle(spaces["g1"][:3], [0, 1, 2],
                                                      ids=["a", "b", "a"], version="v1"))  # fmt: skip
    r = _cli("data", "import", "--gallery", tmp_path / "dup.npz", "--out", tmp_path / "dup.lance")
    assert r.exit_code == 4
    assert r.stderr == f"error: {tmp_path / 'dup.lance'}: id: duplicate id 'a' (rows 0 and 2)\n"
    assert not (tmp_path / "dup.lance").exists()  # created whole or not at all


WITHOUT_LANCE = """
import sys
sys.modules["lance"] = sys.modules["lancedb"] = None  # import lance raises ImportError
import compat.backfill.table, compat.embeddings.table_search, compat.embeddings.table_write
from typer.testing import CliRunner
from compat.cli.main import app
for args in {commands}:
    r = CliRunner().invoke(app, args)
    print(r.exit_code, r.stderr.strip())
"""


def test_without_lancedb_compat_imports_and_a_table_command_names_the_extra(tmp_path, spaces):
    """LanceDB is an optional dependency (``pip install 'compat[lance]'``): compat imports
    without it, and a command given a table exits 2 naming the extra, writing nothing."""
    import subprocess
    import sys

    g, q = str(tmp_path / "g.lance"), str(tmp_path / "q2.npz")
    commands = [["data", "show", g], ["score", "-q", q, "-g", g],
                ["data", "import", "--gallery", str(tmp_path / "g1.npz"), "--out",
                 str(tmp_path / "new.lance")],
                ["data", "export", "--gallery", g, "--out", str(tmp_path / "e.npz")]]  # fmt: skip
    r = subprocess.run([sys.executable, "-c", WITHOUT_LANCE.format(commands=commands)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == len(commands)
    for line in lines:
        assert line == (
            "2 error: a LanceDB table needs LanceDB, an optional dependency: "
            "pip install 'compat[lance]'"
        ), line
    assert not (tmp_path / "new.lance").exists() and not (tmp_path / "e.npz").exists()
