"""``compat promote`` of a version served through a query blend (issue 42 item 1): the gate
checks exactly the blended queries, M(blend(v3), v1) > M(v1, v1), and records the blend and its
weight; a plain adapter named where a blend is served is refused (exit 4)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from compat.cli.main import app
from compat.maps.blend import slerp
from tests.registry.test_promote_serve import _setup

runner = CliRunner()


def _fit(project, folder, role: str) -> dict:
    """Procrustes (and its blend) on pairs of other draws of the same classes."""
    from compat.maps import fit_map, save_map

    old = project.embeddings(1.5, 11)
    new = project.embeddings(0.6, 12, rotate=True)
    fitted = fit_map(
        "procrustes", new, old, labels=list(project.codes), from_name="v3", to_name="v1",
        role=role, blend={} if role == "query-blend" else None,
    )  # fmt: skip
    save_map(folder, fitted)
    return json.loads((folder / "card.json").read_text())


def test_the_gate_checks_the_blended_queries_and_records_the_blend(project):
    _setup(project, "serve: query-blend\n")
    r = runner.invoke(app, ["promote", "v3", "--against", "v1", "--dry-run"])
    assert r.exit_code == 3 and "maps/v3-to-v1-blend" in r.stderr, r.output  # the default folder
    card = _fit(project, project.root / "maps" / "v3-to-v1-blend", "query-blend")
    r = runner.invoke(app, ["promote", "v3", "--against", "v1", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    top1 = next(c for c in report["criteria"] if c["metric"] == "top1")
    assert top1["lhs"] == ["blend(v3)", "v1"] and top1["passed"] and top1["lower_bound"] > 0
    assert top1["description"].startswith("identification top1: M(blend(v3), v1)")
    serve = report["serve"]
    assert serve["mode"] == "query-blend" and serve["blend_weight"] == card["blend"]["weight"]
    assert serve["weights_sha256"] == card["weights_sha256"]
    # exactly the blend: the cell is the blended rows of the evaluation items
    from compat.maps import load_map

    m = load_map(project.root / "maps" / "v3-to-v1-blend")
    new, old = project.embeddings(0.6, 2, rotate=True), project.embeddings(1.5, 1)
    assert (m.queries(new, old) == slerp(old, m.apply(new), m.card.blend.weight)).all()
    from compat.registry.store import Registry

    tag = Registry().get("v3").tags["compat.serve"]
    assert tag.startswith("query-blend procrustes ") and f"weight {m.card.blend.weight:g}" in tag


def test_a_plain_adapter_is_not_served_as_a_blend(project):
    _setup(project, "serve: {mode: query-blend, map: maps/plain}\n")
    _fit(project, project.root / "maps" / "plain", "query-adapter")
    r = runner.invoke(app, ["promote", "v3", "--against", "v1", "--dry-run"])
    assert r.exit_code == 4, r.output
    [line] = r.stderr.strip().splitlines()
    assert "maps/plain/card.json: role: a query-adapter map, but a query-blend map" in line
