"""What ``compat promote`` leaves on the version's MLflow run: matrix cells, checks and gains as
metrics, the report and the evaluate stage's plots as artifacts, a description for people."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.store import Registry

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


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
    (project.root / "metrics" / "compat.json").write_text(json.dumps({"cells": [["v2", "v1"]]}))
    assert cli("promote", "v1", "--against", "none").exit_code == 0
    r = cli("promote", "v2", "--against", "v1", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)

    reg = Registry()
    rec = reg.get("v2")
    metrics = reg.client.get_run(rec.run_id).data.metrics
    assert metrics["gate/passed"] == 1.0
    top1 = report["matrix"]["identification"]["top1"]
    assert metrics["matrix/identification/top1/v2_on_v1"] == top1["v2"]["v1"]
    assert metrics["matrix/identification/top1/v1_on_v1"] == top1["v1"]["v1"]
    assert metrics["matrix/identification/top1/v2p_on_v2p"] == top1["v2p"]["v2p"]
    tar = report["matrix"]["verification"]["tar@far=0.1"]["v2"]["v1"]
    assert metrics["matrix/verification/tar_at_far_0.1/v2_on_v1"] == tar
    for c in report["criteria"]:
        key = f"check/v1/{c['protocol']}/{c['metric'].replace('@', '_at_').replace('=', '_')}"
        assert metrics[f"{key}/difference"] == c["difference"]
        assert metrics[f"{key}/new"] == c["lhs_value"]
        assert metrics[f"{key}/passed"] == 1.0
    assert metrics["gain/identification/top1"] == report["gain"]["identification"]["top1"]["value"]

    def listed(path: str) -> list[str]:
        return [f.path for f in reg.client.list_artifacts(rec.run_id, path)]

    assert listed("plots") == ["plots/cmc", "plots/heatmap_identification.png"]
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
