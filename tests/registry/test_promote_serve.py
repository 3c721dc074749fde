"""``compat promote`` of a version served through a map (issue 27 item 4).

v3 is a model trained elsewhere: its space is a rotation of v1's, so raw it cannot search v1's
stored gallery. A Procrustes query adapter fitted on other items (never the evaluation set) maps
its queries back; with ``serve: query-adapter`` the gate checks M(adapt(v3), v1) > M(v1, v1) and
records which adapter it checked.
"""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from compat.cli.main import app

runner = CliRunner()


def _register(project, version, emb):
    r = runner.invoke(app, ["register", version, "--embeddings", str(project.bundle(version, emb))])
    assert r.exit_code == 0, r.output


def _setup(project, serve: str) -> None:
    project.contract("v1")
    path = project.contract("v3", parent="v1")
    path.write_text(path.read_text() + serve)
    _register(project, "v1", project.embeddings(1.5, 1))
    _register(project, "v3", project.embeddings(0.6, 2, rotate=True))
    assert runner.invoke(app, ["promote", "v1"]).exit_code == 0


def _fit_adapter(project, folder, *, useless: bool = False) -> dict:
    """Procrustes on pairs of other draws of the same classes (the training side)."""
    from compat.maps import fit_map, save_map

    old = project.embeddings(1.5, 11)
    new = project.embeddings(0.6, 12, rotate=True)
    if useless:
        new = np.random.default_rng(5).permutation(new)
    fitted = fit_map(
        "procrustes", new, old, labels=list(project.codes), from_name="v3", to_name="v1"
    )
    save_map(folder, fitted)
    return json.loads((folder / "card.json").read_text())


def test_an_outside_model_passes_through_its_query_adapter_and_the_verdict_names_it(project):
    _setup(project, "serve: query-adapter\n")
    r = runner.invoke(app, ["promote", "v3", "--against", "v1", "--dry-run", "--json"])
    assert r.exit_code == 3, r.output  # no adapter at maps/v3-to-v1 yet
    assert "maps/v3-to-v1" in r.stderr

    card = _fit_adapter(project, project.root / "maps" / "v3-to-v1")
    r = runner.invoke(app, ["promote", "v3", "--against", "v1", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    top1 = next(c for c in report["criteria"] if c["metric"] == "top1")
    assert top1["lhs"] == ["adapt(v3)", "v1"] and top1["passed"]
    assert top1["lower_bound"] > 0
    assert report["serve"]["mode"] == "query-adapter"
    assert report["serve"]["weights_sha256"] == card["weights_sha256"]
    assert report["serve"]["kind"] == "procrustes"
    assert report["serve"]["data_fingerprint"] == card["data"]["fingerprint"]

    from compat.registry.store import Registry

    tag = Registry().get("v3").tags["compat.serve"]
    assert tag.startswith("query-adapter procrustes ") and card["weights_sha256"][:12] in tag
    r = runner.invoke(app, ["chain", "v3", "--json"])
    assert r.exit_code == 0, r.output
    [pair] = json.loads(r.stdout)["pairs"]
    assert (pair["query"], pair["gallery"], pair["verdict"]) == ("v3", "v1", "pass")
    assert pair["serve"] == tag
    r = runner.invoke(app, ["chain", "v3"], env={"COLUMNS": "200"})
    assert "query-adapter procrustes" in r.stdout


def test_the_same_model_served_natively_fails(project):
    _setup(project, "")
    r = runner.invoke(app, ["promote", "v3", "--against", "v1", "--json"])
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["serve"] == {"mode": "native"}
    [pair] = json.loads(runner.invoke(app, ["chain", "v3", "--json"]).stdout)["pairs"]
    assert pair["serve"] == "native"


def test_a_refused_adapter_is_never_served(project):
    _setup(project, "serve: {mode: query-adapter, map: maps/bad}\n")
    card = _fit_adapter(project, project.root / "maps" / "bad", useless=True)
    assert card["refused"] is not None
    r = runner.invoke(app, ["promote", "v3", "--against", "v1", "--dry-run"])
    assert r.exit_code == 4, r.output
    [line] = r.stderr.strip().splitlines()
    assert "maps/bad/card.json: refused:" in line and "never served" in line
