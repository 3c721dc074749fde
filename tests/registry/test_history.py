"""A registry history that never lies (issues 43 and 45): a failed gate never rewrites the status
of a version that is or was production, a version's tags describe its latest verdict whole (no
stale check tags of an earlier one), verify tells a failed gate from a killed promotion, and
``compat show``, ``chain``, the MLflow tags and description, and the log agree at every step."""

from __future__ import annotations

import json

import pytest
from test_rollback import ROLLBACK_ALLOWING_A_LOSS, _chain, cli

from compat.registry.record import VERDICT_PREFIXES
from compat.registry.store import Registry

STRICT = """criteria:
  - {protocol: identification, metric: top1, require: cross > self_parent, margin: 0.9}
"""


def _agree(version: str) -> dict:
    """show --json, chain --json, the version's tags and description, and the log say one
    story of ``version``; returns show's record."""
    shown = json.loads(cli("show", version, "--json").stdout)
    rec = Registry().get(version)
    tags = rec.tags
    assert shown["status"] == tags.get("compat.status", "candidate")
    assert shown["verdict_kind"] == tags.get("compat.verdict.kind")
    recorded = json.loads(tags["compat.checks"]) if "compat.checks" in tags else []
    assert shown["checks"] == recorded
    # every per-check tag belongs to the verdict compat.checks holds: none is left over
    per_check = {k for k in tags if k.startswith(VERDICT_PREFIXES[0])}
    galleries = {c["gallery"] for c in recorded}
    assert all(k.split(".")[2] in galleries for k in per_check), per_check
    kind = tags.get("compat.verdict.kind")
    if kind == "rollback":
        assert "as a rollback from" in rec.description
    elif kind == "promotion" and shown["parent"]:
        assert "its compatibility contract with" in rec.description
    passed = tags.get("compat.verdict.passed")
    if passed is not None and (shown["parent"] or kind == "rollback"):
        assert ("PASSED" in rec.description) == (passed == "true")
    # the run's page (MLflow's run description) tells the same verdict as the version's page
    note = Registry().call("get_run", rec.run_id).data.tags.get("mlflow.note.content", "")
    if kind == "rollback":
        assert "as a rollback from" in note
    if passed is not None and (shown["parent"] or kind == "rollback"):
        assert ("PASSED" in note) == (passed == "true") == ("PASSED" in rec.description)
    assert note.count(" passes: ") + note.count(" FAILS") == len(recorded)
    chain = json.loads(cli("chain", version, "--json").stdout)
    assert chain["lineage"][0] == version
    # chain shows the version's promotion checks in show's order (rollback checks aside)
    first = [c for p in chain["pairs"] if p["query"] == version for c in p["checks"]]
    assert first == [c for c in recorded if c["role"] != "rollback"]
    log = json.loads(cli("log", "--json").stdout)["promotions"]
    moved_to = {p["to"] for p in log if p["state"] == "committed"}
    if version in moved_to:
        assert shown["status"] == "promoted"  # it served: its status is history
    return shown


def test_a_failed_regate_of_production_is_no_kill_and_is_never_repaired(project):
    """Production v3 re-gated under a stricter contract fails (exit 1): its status stays
    'promoted', its latest verdict reads failed, verify finds nothing to repair, and --repair
    rewrites nothing (issue 45: verify claimed 'a kill after the logged move' and repair wrote
    failed -> promoted)."""
    _chain(project)
    contract = project.root / "contracts" / "v3.yaml"
    text = contract.read_text()
    contract.write_text(text[: text.index("criteria:")] + STRICT)
    r = cli("promote", "v3", "--against", "v3", "--bootstrap", "200")
    assert r.exit_code == 1, r.output
    rec = Registry().get("v3")
    assert rec.tags["compat.status"] == "promoted" and rec.tags["compat.verdict.passed"] == "false"
    v = cli("verify", "--json")
    assert v.exit_code == 0, v.output
    assert json.loads(v.stdout)["problems"] == []
    before = dict(Registry().get("v3").tags)
    assert cli("verify", "--repair").exit_code == 0
    assert Registry().get("v3").tags == before
    _agree("v3")


def test_a_status_a_gate_recorded_is_not_a_kills_leftover(project):
    """A registry written before the rule (production's status set 'failed' by a later gate):
    verify names no killed promotion and --repair leaves the recorded verdict."""
    _chain(project)
    reg = Registry()
    reg.set_tags(reg.get("v3"), {"compat.status": "failed"})
    v = cli("verify", "--json")
    assert v.exit_code == 0 and json.loads(v.stdout)["problems"] == [], v.output
    assert cli("verify", "--repair").exit_code == 0
    assert Registry().get("v3").tags["compat.status"] == "failed"


def test_promote_failed_rollback_passed_rollback_repromote_tell_one_story(project):
    _chain(project, v3_noise=1.3)  # v3's rows are worse than v2's: a rollback loses on them
    for name in ("v1", "v2", "v3"):
        _agree(name)
    # a failed rollback: v2 keeps 'promoted', reads as a failed rollback, production unchanged
    r = cli("promote", "v2", "--against", "v3", "--rollback", "--bootstrap", "200")
    assert r.exit_code == 1, r.output
    shown = _agree("v2")
    assert (shown["status"], shown["verdict_kind"], shown["verdict_passed"]) == (
        "promoted", "rollback", False
    )  # fmt: skip
    assert Registry().production() == "v3"
    # the team accepts the loss in v2's contract: the rollback passes and moves production
    contract = project.root / "contracts" / "v2.yaml"
    contract.write_text(contract.read_text() + ROLLBACK_ALLOWING_A_LOSS)
    r = cli("promote", "v2", "--against", "v3", "--rollback", "--bootstrap", "200")
    assert r.exit_code == 0, r.output
    shown = _agree("v2")
    assert (shown["verdict_kind"], shown["verdict_passed"]) == ("rollback", True)
    assert Registry().production() == "v2"
    log = json.loads(cli("log", "--json").stdout)["promotions"]
    assert (log[-1]["to"], log[-1]["kind"], log[-1]["state"]) == ("v2", "rollback", "committed")
    # forward again: an ordinary promotion, and v2's rollback checks are not v3's
    r = cli("promote", "v3", "--against", "v2", "--bootstrap", "200")
    assert r.exit_code == 0, r.output
    shown = _agree("v3")
    assert shown["verdict_kind"] == "promotion" and shown["status"] == "promoted"
    assert {c["role"] for c in shown["checks"]} <= {"parent", "transitive"}
    for name in ("v1", "v2", "v3"):
        _agree(name)


@pytest.mark.slow  # the default run checks this through faster tests; -m slow runs it
def test_promote_show_and_chain_order_checks_alike(project):
    """Gallery by gallery, the nearest first, each in the contract's order of criteria."""
    project.contract("v1")
    project.contract("v2", parent="v1")
    project.contract("v3", parent="v2", transitive=("v1",))
    for name, noise, seed in (("v1", 1.5, 1), ("v2", 0.8, 2), ("v3", 0.5, 3)):
        bundle = project.bundle(name, project.embeddings(noise, seed))
        assert cli("register", name, "--embeddings", str(bundle)).exit_code == 0
    for args in (("v1",), ("v2", "--against", "v1")):
        assert cli("promote", *args, "--bootstrap", "50").exit_code == 0
    r = cli("promote", "v3", "--against", "v2", "--bootstrap", "50", "--json")
    assert r.exit_code == 0, r.output
    key = [(c["gallery"], c["metric"]) for c in json.loads(r.stdout)["checks"]]
    assert key == [("v2", "top1"), ("v2", "tar@far=0.1"), ("v1", "top1"), ("v1", "tar@far=0.1")]
    shown = json.loads(cli("show", "v3", "--json").stdout)["checks"]
    pairs = json.loads(cli("chain", "v3", "--json").stdout)["pairs"]
    chained = [c for p in pairs if p["query"] == "v3" for c in p["checks"]]
    assert [(c["gallery"], c["metric"]) for c in shown] == key
    assert [(c["gallery"], c["metric"]) for c in chained] == key
