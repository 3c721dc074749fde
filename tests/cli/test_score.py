"""``compat score`` through typer's runner: output formats and every documented exit code."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from compat.cli import score as score_cli

app = typer.Typer()


@app.callback()
def _root() -> None:
    """Test app holding only the score command."""


score_cli.register(app)
runner = CliRunner()

KEYS = [
    "top1", "top5", "top10", "mAP", "mAP@100",
    "tpir@fpir=0.1", "tpir@fpir=0.01",
    "tar@far=0.1", "tar@far=0.01", "tar@far=0.001",
]  # fmt: skip


GROUPS = {
    "identification": KEYS[:5], "open-set": KEYS[5:7], "verification": KEYS[7:],
}  # fmt: skip


def _metrics(data: dict) -> dict:
    """Every protocol's metrics of a ``score --json`` object, in one mapping."""
    return {k: v for g in data["protocols"].values() for k, v in g["metrics"].items()}


def _save(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return str(path)


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((25, 16))
    ql = np.repeat(np.arange(25), 4)  # classes 20-24 absent from the gallery: non-mated
    gl = np.repeat(np.arange(20), 3)
    q = centers[ql] + 0.7 * rng.standard_normal((ql.size, 16))
    g = centers[gl] + 0.7 * rng.standard_normal((gl.size, 16))
    return (
        _save(tmp_path / "q.npz", embeddings=q.astype(np.float32), labels=ql),
        _save(tmp_path / "g.npz", embeddings=g, labels=gl),  # float64 is fine
        tmp_path,
    )


def test_json_is_exactly_one_object_with_reference_keys(files):
    q, g, _ = files
    result = runner.invoke(app, ["score", "--query", q, "--gallery", g, "--json"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    data = json.loads(lines[0])
    assert list(data) == ["query", "gallery", "protocols", "index", "notes"]
    assert data["query"] == q and data["index"] is None
    # grouped by protocol, each with its metrics and its counts
    assert {n: list(g["metrics"]) for n, g in data["protocols"].items()} == GROUPS
    assert data["protocols"]["identification"]["counts"]["valid_queries"] == 80
    assert data["protocols"]["open-set"]["counts"] == {"mated": 80, "non_mated": 20}
    m = _metrics(data)
    assert all(0.0 <= v <= 1.0 for v in m.values())
    assert m["top10"] >= m["top5"] >= m["top1"] > 0.3


def test_protocol_selection_and_table_output(files):
    q, g, _ = files
    result = runner.invoke(
        app, ["score", "-q", q, "-g", g, "-p", "verification", "-p", "open-set", "--json"]
    )
    assert result.exit_code == 0
    assert sorted(_metrics(json.loads(result.stdout))) == sorted(KEYS[5:])
    table = runner.invoke(app, ["score", "-q", q, "-g", g, "--protocol", "identification"])
    assert table.exit_code == 0
    assert "top1" in table.stdout and "mAP@100" in table.stdout and "tar@far" not in table.stdout


def test_same_file_is_leave_one_out(files):
    q, _, _ = files
    loo = _metrics(json.loads(
        runner.invoke(app, ["score", "-q", q, "-g", q, "--json", "-p", "identification"]).stdout
    ))  # fmt: skip
    assert loo["top1"] < 1.0  # a query does not find itself
    assert loo["top1"] > 0.3


def test_undefined_metrics_are_null_with_a_note(files):
    q, _, _tmp = files
    # Every query label is in the gallery: there is no non-mated probe.
    result = runner.invoke(app, ["score", "-q", q, "-g", q, "-p", "open-set", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert _metrics(data) == {"tpir@fpir=0.1": None, "tpir@fpir=0.01": None}
    assert data["notes"] == ["open-set undefined: every query label occurs in the gallery"]
    assert "note: open-set undefined" in result.stderr


def test_no_normalize_uses_raw_inner_products(files):
    q, g, tmp = files
    a = json.loads(
        runner.invoke(app, ["score", "-q", q, "-g", g, "--json", "-p", "identification"]).stdout
    )
    b = json.loads(
        runner.invoke(
            app, ["score", "-q", q, "-g", g, "--json", "-p", "identification", "--no-normalize"]
        ).stdout
    )
    assert a != b
    zero = _save(tmp / "z.npz", embeddings=np.zeros((2, 16)), labels=np.array([0, 1]))
    result = runner.invoke(app, ["score", "-q", zero, "-g", g])
    assert result.exit_code == 4 and "zero norm" in result.stderr


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"embeddings": np.ones((3, 8)), "labels": np.arange(3)}, "does not match"),
        ({"embeddings": np.array([[np.nan] * 16]), "labels": np.array([0])}, "NaN or inf"),
        ({"embeddings": np.ones((0, 16)), "labels": np.array([], int)}, "empty"),
        ({"labels": np.arange(3)}, "embeddings: missing key"),
        ({"embeddings": np.ones((3, 16))}, "labels: missing key"),
        (
            {"embeddings": np.ones((2, 16)), "labels": np.array([0.5, 1.0])},
            "labels: not an integer",
        ),
        (
            {"embeddings": np.ones((2, 16)), "labels": np.array(["a", "b"])},
            "labels: expected integers",
        ),
        ({"embeddings": np.ones((3, 16)), "labels": np.arange(2)}, "2 labels for 3"),
    ],
)
def test_bad_input_exits_4_with_one_line(files, arrays, message):
    _, g, tmp = files
    bad = _save(tmp / "bad.npz", **arrays)
    for args in (["-q", bad, "-g", g], ["-q", g, "-g", bad]):
        result = runner.invoke(app, ["score", *args, "--json"])
        assert result.exit_code == 4, (args, result.output)
        assert result.stdout == ""
        err = result.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_missing_file_exits_3(files):
    q, _, tmp = files
    result = runner.invoke(app, ["score", "-q", q, "-g", str(tmp / "missing.npz")])
    assert result.exit_code == 3
    assert result.stderr.strip() == f"error: {tmp / 'missing.npz'}: file not found"


def test_unknown_protocol_exits_2(files):
    q, g, _ = files
    result = runner.invoke(app, ["score", "-q", q, "-g", g, "-p", "ranking"])
    assert result.exit_code == 2
    assert "unknown protocol 'ranking'" in result.stderr


def test_help_documents_pairs_and_non_mated_probes():
    result = runner.invoke(app, ["score", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "non-mated" in text and "--max-pairs" in text and "genuine" in text


def test_npy_and_parquet_galleries_score_like_npz(files):
    from compat.embeddings.bundle import Sidecar, load_bundle, save_sidecar
    from compat.embeddings.formats import write_shard

    q, g, tmp = files
    b = load_bundle(g)
    np.save(tmp / "g.npy", b.embeddings)
    save_sidecar(tmp / "g.meta.npz", Sidecar(b.labels, None, None, None, None, {}))
    (tmp / "shards").mkdir()
    ids = np.array([f"r{i}" for i in range(len(b))])
    write_shard(tmp / "shards" / "a.parquet", ids[:25], b.embeddings[:25], b.labels[:25], None)
    write_shard(tmp / "shards" / "b.parquet", ids[25:], b.embeddings[25:], b.labels[25:], None)
    want = json.loads(runner.invoke(app, ["score", "-q", q, "-g", g, "--json"]).stdout)
    for other in (tmp / "g.npy", tmp / "shards"):
        r = runner.invoke(app, ["score", "-q", q, "-g", str(other), "--json"])
        assert r.exit_code == 0, r.output
        assert {**json.loads(r.stdout), "gallery": g} == want


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_index_reports_recall_against_exact_search(files):
    q, g, _ = files
    # recall@10 of an exhaustive index is exactly 1 only when no query's 10th and 11th scores
    # nearly tie (float32 rounding here is under 1e-6; faiss and torch sum in other orders);
    # score ranks L2-normalised rows, so the gap is measured on those
    s = np.sort(_unit(np.load(q)["embeddings"]) @ _unit(np.load(g)["embeddings"]).T, axis=1)
    assert (s[:, -10] - s[:, -11]).min() > 1e-4
    r = runner.invoke(app, ["score", "-q", q, "-g", g, "--json", "--index", "flat"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["index"]["recall@10"] == 1.0 and data["index"]["spec"] == "flat"
    assert list(_metrics(data)) == KEYS  # the metrics stay exact
    r = runner.invoke(app, ["score", "-q", q, "-g", g, "--index", "ivf",
                            "--index-param", "nlist=1", "--index-param", "nprobe=1"])  # fmt: skip
    assert r.exit_code == 0, r.output  # one cell scanned whole: exact
    assert "index ivf(nlist=1,nprobe=1,train=60): recall@10 1.0000 against exact" in r.stdout
    r = runner.invoke(app, ["score", "-q", q, "-g", g, "--json", "--index", "hnsw"])
    assert 0.5 < json.loads(r.stdout)["index"]["recall@10"] <= 1.0
    # the default IVF on a small gallery scans a quarter of its cells, and says exact is better
    r = runner.invoke(app, ["score", "-q", q, "-g", g, "--json", "--index", "ivf"])
    data = json.loads(r.stdout)
    assert data["index"]["spec"].startswith("ivf(nlist=1,nprobe=1")  # 60 rows: one cell
    assert any("exact search (without --index) is the better choice" in n for n in data["notes"])


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["--index", "lsh"], 2, "--index 'lsh': unknown; known: flat, ivf, hnsw, ivfpq"),
        (["--index", "ivf", "--index-param", "M=3"], 2, "ivf takes key=value with key in"),
        (["--index", "ivf", "--index-param", "nlist=x"], 2, "'x' is not an integer"),
        (["--index", "ivf", "--index-param", "nlist=500"], 4, "60 training rows for 500 cells"),
    ],
)
def test_index_errors(files, args, code, text):
    q, g, _ = files
    r = runner.invoke(app, ["score", "-q", q, "-g", g, *args])
    assert r.exit_code == code, r.output
    assert text in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize("scale", [1e20, 1e-30, 3e38])
def test_cosine_metrics_do_not_depend_on_a_rows_scale(files, scale):
    """Finite float32 rows whose squared norm overflows (1e20) or underflows (1e-30) are
    normalised safely: the cosine metrics equal those of the unscaled rows (issue 30 item 8)."""
    q, g, root = files
    with np.load(q) as z:
        emb, labels = z["embeddings"], z["labels"]
    peak = np.abs(emb).max()
    scaled = (emb.astype(np.float64) * (scale / peak)).astype(np.float32)
    assert np.isfinite(scaled).all() and (scaled != 0).any(axis=1).all()
    big = _save(root / "big.npz", embeddings=scaled, labels=labels)
    base = runner.invoke(app, ["score", "-q", q, "-g", g, "--json"])
    got = runner.invoke(app, ["score", "-q", big, "-g", g, "--json"])
    assert base.exit_code == 0 and got.exit_code == 0, got.output
    want, have = _metrics(json.loads(base.stdout)), _metrics(json.loads(got.stdout))
    assert have["top1"] > 0.5
    # The scaled rows are normalised through float64 (compat.models.norms), the plain ones in
    # float32: the unit rows may differ in the last bit, so the scores by ~1e-7. The metrics are
    # functions of orders (a positive against another row, a query's top score against
    # another's, a genuine pair against an impostor), and every such gap here is at least
    # 1e-6, so they are equal on any processor; the gaps are asserted.
    s = _unit(emb) @ _unit(np.load(g)["embeddings"]).T
    same = labels[:, None] == np.load(g)["labels"][None, :]
    rows = [np.abs(r[p][:, None] - r[~p][None, :]).min() for r, p in zip(s, same, strict=True)
            if p.any() and (~p).any()]  # fmt: skip
    assert min(rows) > 1e-5 and np.diff(np.sort(s.max(axis=1))).min() > 1e-5
    assert np.abs(s[same][:, None] - s[~same][None, :]).min() > 1e-6
    for key in KEYS:
        assert have[key] == pytest.approx(want[key], abs=1e-9), key


def test_raw_inner_products_that_overflow_are_refused(files):
    q, _, root = files
    with np.load(q) as z:
        emb, labels = z["embeddings"] * np.float32(1e20), z["labels"]
    big = _save(root / "big.npz", embeddings=emb, labels=labels)
    r = runner.invoke(app, ["score", "-q", big, "-g", big, "--no-normalize"])
    assert r.exit_code == 4
    [line] = r.output.strip().splitlines()
    assert "big.npz: embeddings: row " in line and "overflows float32 inner products" in line
