"""Rollback is a gated, explicit operation: promoting a version that is not a descendant of
production needs --rollback, is judged also on the rows production embedded (M(candidate,
production) against M(production, production)), and is logged and shown as a rollback."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.promote import rollback_galleries, served_since
from compat.registry.store import Registry

runner = CliRunner()

ROLLBACK_ALLOWING_A_LOSS = """rollback:
  criteria:
    - protocol: identification
      metric: top1
      require: cross > self_parent
      margin: -0.5          # the team accepts up to 50 points lost on v3's rows
      confidence: 0.95
"""


def cli(*args: str, **kw):
    return runner.invoke(app, list(args), **kw)


def _chain(project, v2_rollback: str = "") -> None:
    """v1 -> v2 -> v3 registered and promoted in turn; production is v3."""
    project.contract("v1")
    project.contract("v2", parent="v1").write_text(
        project.contract("v2", parent="v1").read_text() + v2_rollback
    )
    project.contract("v3", parent="v2")
    for name, noise, seed in (("v1", 1.5, 1), ("v2", 0.8, 2), ("v3", 0.5, 3)):
        bundle = project.bundle(name, project.embeddings(noise, seed))
        assert cli("register", name, "--embeddings", str(bundle)).exit_code == 0
    for args in (("v1",), ("v2", "--against", "v1"), ("v3", "--against", "v2")):
        r = cli("promote", *args, "--bootstrap", "200")
        assert r.exit_code == 0, r.output


def test_a_rollback_without_the_flag_is_refused_naming_both_versions(project):
    _chain(project)
    r = cli("promote", "v2", "--against", "v3")
    assert r.exit_code == 6
    assert "promoting v2 while production is 'v3' is a rollback" in r.stderr
    assert "--rollback" in r.stderr
    assert Registry().production() == "v3"
    assert Registry().get("v2").tags["compat.status"] == "promoted"  # nothing was judged


def test_the_flag_on_an_ordinary_promotion_is_a_usage_error(project):
    _chain(project)
    r = cli("promote", "v3", "--against", "v3", "--rollback")
    assert r.exit_code == 2 and "is not a rollback" in r.stderr


def test_a_rollback_that_fails_on_the_rows_production_embedded(project, tmp_path, monkeypatch):
    _chain(project)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    r = cli("promote", "v2", "--against", "v3", "--rollback", "--bootstrap", "200", "--json")
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)
    assert report["rollback"] == {"from": "v3", "serve": ["v3"]}
    back = [c for c in report["checks"] if c["role"] == "rollback"]
    assert [(c["gallery"], c["metric"], c["verdict"]) for c in back] == [
        ("v3", "top1", "fail"),
        ("v3", "tar@far=0.1", "fail"),
    ]
    top1 = back[0]
    # M(v2, v3) against M(v3, v3): v2's queries are noisier than v3's
    m = report["matrix"]["identification"]["top1"]
    assert (top1["new"], top1["baseline"]) == (m["v2"]["v3"], m["v3"]["v3"])
    assert top1["new"] < top1["baseline"]
    # v2's own contract (against v1) is judged too, and still holds
    assert all(c["verdict"] == "pass" for c in report["checks"] if c["role"] == "parent")
    reg = Registry()
    assert reg.production() == "v3"
    assert reg.get("v2").tags["compat.verdict.kind"] == "rollback"
    # v2 served once: a failed gate never rewrites its history (issue 45: it read 'failed')
    assert reg.get("v2").tags["compat.status"] == "promoted"
    assert reg.get("v2").tags["compat.verdict.passed"] == "false"
    assert "FAILED its gate as a rollback from v3" in reg.get("v2").description
    assert summary.read_text().startswith(
        "### compat promote v2 (rollback from v3): FAILED (production unchanged)"
    )
    assert "| v3 (rollback) |" in summary.read_text()


def test_a_rollback_that_passes_is_logged_and_shown_as_one(project):
    _chain(project, ROLLBACK_ALLOWING_A_LOSS)
    r = cli("promote", "v2", "--against", "v3", "--rollback", "--bootstrap", "200")
    assert r.exit_code == 0, r.output
    assert "v2: rollback from v3" in r.stdout and "PASSED: production -> v2 (rollback)" in r.stdout
    assert "| identification | top1 | v3 (rollback) | cross > self_parent | -0.5 |" in r.stdout
    reg = Registry()
    assert reg.production() == "v2"
    last = reg.ledger().promotions()[-1]
    assert (last["from"], last["to"], last["state"], last["kind"]) == (
        "v3", "v2", "committed", "rollback"
    )  # fmt: skip
    log = cli("log")
    assert log.exit_code == 0
    rows = [line for line in log.stdout.splitlines() if "| rollback |" in line]
    assert len(rows) == 1 and "| v3 | v2 | committed |" in rows[0]
    assert json.loads(cli("log", "--json").stdout)["promotions"][-1]["kind"] == "rollback"
    shown = json.loads(cli("show", "v2", "--json").stdout)
    assert shown["verdict_kind"] == "rollback"
    assert {c["role"] for c in shown["checks"]} == {"parent", "rollback"}
    # forward again: v3 against v2 is an ordinary promotion (v2 is v3's parent)
    r = cli("promote", "v3", "--against", "v2", "--bootstrap", "200")
    assert r.exit_code == 0, r.output
    assert reg.ledger().promotions()[-1].get("kind") is None


def test_a_sibling_of_production_is_a_rollback_too(project):
    _chain(project)
    project.contract("v3b", parent="v2")
    bundle = project.bundle("v3b", project.embeddings(0.5, 7))
    assert cli("register", "v3b", "--embeddings", str(bundle)).exit_code == 0
    r = cli("promote", "v3b", "--against", "v3")
    assert r.exit_code == 6 and "v3 is not an ancestor of v3b" in r.stderr


def test_which_rows_a_rollback_must_serve():
    from compat.contracts.schema import Contract

    log = [
        {"state": "committed", "to": "v1"},
        {"state": "committed", "to": "v2"},
        {"state": "committed", "to": "v3"},
        {"state": "aborted", "to": "v5"},
        {"state": "committed", "to": "v4"},
    ]
    assert served_since(log, "v2") == ["v3", "v4"]
    assert served_since(log, "v9") == []  # never served: nothing added since
    contract = Contract(version="v2", parent="v1", embedding_dim=8, head="cosface",
                        criteria=[{"protocol": "identification", "metric": "top1"}])  # fmt: skip
    assert rollback_galleries(contract, "v4", log) == ["v4", "v3"]
    declared = Contract.model_validate({**contract.model_dump(), "rollback": {"serve": ["v4"]}})
    assert rollback_galleries(declared, "v4", log) == ["v4"]
