"""What ``compat promote`` leaves on the version's MLflow run: matrix cells and checks as MLflow
tables, the verdict and meaningful gains as a few ``verdict/`` metrics, the report and the
evaluate stage's plots as artifacts, a description for people."""

from __future__ import annotations

import json
from pathlib import Path

from pytest import approx
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.store import Registry

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


def _text(reg: Registry, run_id: str, path: str) -> str:
    """The text of one of the run's artifacts."""
    from mlflow.artifacts import download_artifacts

    local = download_artifacts(run_id=run_id, artifact_path=path, tracking_uri=reg.tracking_uri)
    return Path(local).read_text(encoding="utf-8")


def _table(reg: Registry, run_id: str, path: str) -> list[dict]:
    """The rows of an MLflow table artifact (``MlflowClient.log_table``'s JSON)."""
    data = json.loads(_text(reg, run_id, path))
    return [dict(zip(data["columns"], row, strict=True)) for row in data["data"]]


def test_promote_logs_the_compatibility_story_on_the_run(project):
    project.contract("v1")
    project.contract("v2", parent="v1", paragon="v2p")
    project.contract("v2p")
    noise = {"v1": (1.5, 1), "v2": (0.8, 2), "v2p": (0.6, 3)}
    for v, (n, seed) in noise.items():
        r = cli("register", v, "--embeddings", str(project.bundle(v, project.embeddings(n, seed))))
        assert r.exit_code == 0, r.output
    # What the evaluate stage wrote for this chain (plots/, metrics/compat.json naming v2).
    (project.root / "plots" / "cmc").mkdir(parents=True)
    (project.root / "plots" / "heatmap_identification.png").write_bytes(b"\x89PNG fake")
    (project.root / "plots" / "cmc" / "v2_on_v1.json").write_text("[]")
    (project.root / "metrics").mkdir()
    # The evaluate stage's matrix has protocols the gate did not judge (open-set), and cells of
    # versions this gate did not use (v9): the run's tables keep the first, not the second.
    evaluated = {
        "open-set": {"tpir@fpir=0.1": {"v2": {"v1": 0.25, "v9": 0.5}, "v1": {"v1": 0.125}}}
    }
    summary = {"cells": [["v2", "v1"]], "matrix": evaluated}
    (project.root / "metrics" / "compat.json").write_text(json.dumps(summary))
    assert cli("promote", "v1", "--against", "none").exit_code == 0
    r = cli("promote", "v2", "--against", "v1", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)

    reg = Registry()
    rec = reg.get("v2")
    run = reg.client.get_run(rec.run_id)
    metrics = run.data.metrics
    assert metrics["verdict/passed"] == 1.0 and metrics["verdict/checks_failed"] == 0.0
    gain = report["gain"]["identification"]["top1"]
    assert gain["meaningful"] and metrics["verdict/gain/identification/top1"] == gain["value"]
    assert not [k for k in metrics if k.split("/")[0] in ("matrix", "check", "gain", "gate")]
    # The cells and checks are MLflow tables on the run (verdict/matrix.json, checks.json).
    table = _table(reg, rec.run_id, "verdict/matrix.json")
    # (MLflow writes a table through pandas' JSON: 10 significant decimals; the report is exact.)
    cells = {
        (r["protocol"], r["metric"], r["query"], r["gallery"]): approx(r["value"]) for r in table
    }
    top1 = report["matrix"]["identification"]["top1"]
    assert cells["identification", "top1", "v2", "v1"] == top1["v2"]["v1"]
    assert cells["identification", "top1", "v1", "v1"] == top1["v1"]["v1"]
    assert cells["identification", "top1", "v2p", "v2p"] == top1["v2p"]["v2p"]
    tar = report["matrix"]["verification"]["tar@far=0.1"]["v2"]["v1"]
    assert cells["verification", "tar@far=0.1", "v2", "v1"] == tar
    assert cells["open-set", "tpir@fpir=0.1", "v2", "v1"] == 0.25
    assert not [c for c in cells if "v9" in c]
    page = _text(reg, rec.run_id, "verdict/matrix.html")
    assert "open-set: M[query][gallery]" in page and "verification: M[query][gallery]" in page
    assert "<td>v2</td>" in page and "25.0%" in page and "v9" not in page
    checks = _table(reg, rec.run_id, "verdict/checks.json")
    assert len(checks) == len(report["criteria"]) == 2
    for c, row in zip(report["criteria"], checks, strict=True):
        assert (row["protocol"], row["metric"], row["gallery"]) == (
            c["protocol"],
            c["metric"],
            "v1",
        )
        assert approx(row["difference"]) == c["difference"] and approx(row["new"]) == c["lhs_value"]
        assert row["verdict"] == "pass"

    # The run: named by the version, described by the verdict in one paragraph, and the
    # evaluation set it was judged on as a dataset input (name, digest, size).
    assert run.info.run_name == "v2"
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("v2 PASSED its compatibility contract with v1 (2 of 2 checks pass).")
    assert "\n" not in note and "Promotion requested against v1" in note
    (data,) = [d for d in run.inputs.dataset_inputs if d.tags[0].value == "evaluation"]
    # (bundles only: no source embedded, so the digest is the manifest's fingerprint)
    assert data.dataset.digest == (report["data_fingerprint"] or "f" * 16)
    assert data.dataset.name == "eval:" + "f" * 8
    profile = json.loads(data.dataset.profile)
    assert profile["items"] == len(project.items) and profile["queries"] == len(project.items) // 2

    def listed(path: str) -> list[str]:
        return [f.path for f in reg.client.list_artifacts(rec.run_id, path)]

    assert listed("plots") == ["plots/cmc", "plots/heatmap_identification.png"]
    assert {"verdict/matrix.html", "verdict/heatmap_identification.png"} <= set(listed("verdict"))
    assert listed("plots/cmc") == ["plots/cmc/v2_on_v1.json"]
    assert listed("metrics") == ["metrics/compat.json"]
    assert len(listed("reports")) == 1

    text = rec.description
    lines = text.splitlines()
    assert lines[0] == "v2 PASSED its compatibility contract with v1."
    checks = [line for line in lines if line.startswith("- pass: ")]
    assert len(checks) == len(report["criteria"]) == 2
    assert all("%" in line and " pts" in line for line in checks)
    assert "None" not in text and "True" not in text and "False" not in text
    # No long floats: every number has at most one decimal.
    assert not [
        w for w in text.replace("%", " ").split() if len(w.split(".")[-1]) > 2 and w[0].isdigit()
    ]
    assert reg.get("v1").description.startswith("v1 has no parent")
    # v1 was not evaluated by that metrics/compat.json: no plots on its run.
    assert not reg.client.list_artifacts(reg.get("v1").run_id, "plots")
