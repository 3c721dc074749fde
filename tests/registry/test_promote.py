"""The gate end to end on embeddings-registered versions: exit codes, records, alias, log."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.promotions import PromotionLog
from compat.registry.store import Registry

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


def _setup(project, v2_emb, v2_dim=None):
    project.contract("v1")
    project.contract("v2", parent="v1", dim=v2_dim or 16)
    assert (
        cli(
            "register", "v1", "--embeddings", str(project.bundle("v1", project.embeddings(1.5, 1)))
        ).exit_code
        == 0
    )
    r = cli("register", "v2", "--embeddings", str(project.bundle("v2", v2_emb)))
    assert r.exit_code == 0, r.output
    r = cli("promote", "v1")
    assert r.exit_code == 0, r.output


def test_compatible_version_passes_and_moves_production(project):
    _setup(project, project.embeddings(0.8, 2))
    r = cli("promote", "v2", "--against", "v1", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["passed"] and report["moved"]
    assert {c["gallery"] for c in report["criteria"]} == {"v1"}
    assert all(c["difference"] > 0 for c in report["criteria"])
    reg = Registry()
    assert reg.production() == "v2"
    rec = reg.get("v2")
    assert rec.tags["compat.status"] == "promoted"
    assert rec.tags["compat.check.v1.identification.top1"].startswith("pass")
    assert "PASSED" in rec.description
    promos = PromotionLog("registry").promotions()
    assert [(p["from"], p["to"], p["state"]) for p in promos] == [
        (None, "v1", "committed"),
        ("v1", "v2", "committed"),
    ]
    assert promos[1]["report_sha256"] == report["report_sha256"]


def test_identical_version_fails_the_strict_criterion(project):
    same = project.embeddings(1.5, 1)
    _setup(project, same)
    r = cli("promote", "v2", "--against", "v1", "--json")
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert not report["passed"] and all(c["difference"] == 0 for c in report["criteria"])
    reg = Registry()
    assert reg.production() == "v1"
    assert reg.get("v2").tags["compat.status"] == "failed"


def test_incompatible_version_fails(project):
    _setup(project, project.embeddings(0.4, 2, rotate=True))
    r = cli("promote", "v2", "--against", "v1")
    assert r.exit_code == 1
    assert "FAIL" in r.stdout


def test_dry_run_writes_nothing(project):
    _setup(project, project.embeddings(0.8, 2))
    before = PromotionLog("registry").lines()
    r = cli("promote", "v2", "--against", "v1", "--dry-run")
    assert r.exit_code == 0, r.output
    reg = Registry()
    assert reg.production() == "v1"
    assert reg.get("v2").tags["compat.status"] == "candidate"
    assert PromotionLog("registry").lines() == before


def test_repromote_is_idempotent(project):
    _setup(project, project.embeddings(0.8, 2))
    assert cli("promote", "v2", "--against", "v1").exit_code == 0
    r = cli("promote", "v2", "--against", "v1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["moved"] is False
    assert [p["to"] for p in PromotionLog("registry").promotions()] == ["v1", "v2"]
    assert Registry().production() == "v2"


def test_not_found_and_bad_input_exit_codes(project):
    _setup(project, project.embeddings(0.8, 2))
    assert cli("promote", "v9", "--against", "v1").exit_code == 3  # no contract
    project.contract("v9", parent="v1")
    r = cli("promote", "v9", "--against", "v1")
    assert r.exit_code == 3 and "not registered" in r.stderr
    # the contract contradicts the registered card
    project.contract("v2", parent="v1", dim=32)
    r = cli("promote", "v2", "--against", "v1")
    assert r.exit_code == 4 and "embedding_dim" in r.stderr
    # malformed YAML
    (project.root / "contracts" / "v2.yaml").write_text("version: [v2\n")
    assert cli("promote", "v2", "--against", "v1").exit_code == 4


def test_embeddings_of_the_wrong_dimension_are_refused(project):
    project.contract("v1")
    project.contract("v2", parent="v1", dim=8)
    r = cli("register", "v2", "--embeddings", str(project.bundle("v2", project.embeddings(0.8, 2))))
    assert r.exit_code == 4
    assert "dimension 16" in r.stderr


def test_unreachable_registry_exits_5(project):
    project.contract("v1")
    r = cli("versions", "--registry-uri", "http://127.0.0.1:9")
    assert r.exit_code == 5, r.output
    assert "unreachable" in r.stderr or "failed" in r.stderr


def test_conflict_when_production_moved(project):
    _setup(project, project.embeddings(0.8, 2))
    project.contract("v2b", parent="v1")
    assert (
        cli(
            "register",
            "v2b",
            "--embeddings",
            str(project.bundle("v2b", project.embeddings(0.8, 3))),
        ).exit_code
        == 0
    )
    assert cli("promote", "v2", "--against", "v1").exit_code == 0
    r = cli("promote", "v2b", "--against", "v1")
    assert r.exit_code == 6
    assert "production is 'v2'" in r.stderr
    assert Registry().production() == "v2"


def test_log_survives_a_crash_between_alias_move_and_log_append(
    project, monkeypatch: pytest.MonkeyPatch
):
    _setup(project, project.embeddings(0.8, 2))
    calls = {"n": 0}
    real_finish = PromotionLog.finish

    def crash(self, pid, state="committed", recovered=False):
        calls["n"] += 1
        raise KeyboardInterrupt("killed after the alias moved")

    monkeypatch.setattr(PromotionLog, "finish", crash)
    with pytest.raises(KeyboardInterrupt):
        from compat.registry.promote import promote

        promote("v2", "v1", reg=Registry(), resamples=50)
    monkeypatch.setattr(PromotionLog, "finish", real_finish)
    assert Registry().production() == "v2"  # the alias moved
    assert PromotionLog("registry").promotions()[-1]["state"] == "pending"
    # the next promotion resolves it under the lock: nothing is lost
    project.contract("v3", parent="v2")
    assert (
        cli(
            "register", "v3", "--embeddings", str(project.bundle("v3", project.embeddings(0.5, 4)))
        ).exit_code
        == 0
    )
    r = cli("promote", "v3", "--against", "v2")
    assert r.exit_code == 0, r.output
    promos = PromotionLog("registry").promotions()
    assert [(p["to"], p["state"], p.get("recovered", False)) for p in promos] == [
        ("v1", "committed", False),
        ("v2", "committed", True),
        ("v3", "committed", False),
    ]


def test_browsing_commands(project):
    _setup(project, project.embeddings(0.8, 2))
    assert cli("promote", "v2", "--against", "v1").exit_code == 0
    r = cli("versions", "--json")
    assert r.exit_code == 0
    rows = {v["version"]: v for v in json.loads(r.stdout)["versions"]}
    assert (
        rows["v2"]["production"] and rows["v2"]["parent"] == "v1" and not rows["v1"]["production"]
    )
    r = cli("show", "v2", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["tags"]["compat.version"] == "v2"
    assert cli("show", "v7").exit_code == 3
    r = cli("log", "--json")
    assert [p["to"] for p in json.loads(r.stdout)["promotions"]] == ["v1", "v2"]
    for cmd in (["versions"], ["show", "v2"], ["log"], ["chain"]):
        assert cli(*cmd).exit_code == 0


def test_chain_flags_pairs_never_checked(project):
    _setup(project, project.embeddings(0.8, 2))
    assert cli("promote", "v2", "--against", "v1").exit_code == 0
    project.contract("v3", parent="v2")  # no transitive: v3 vs v1 is never checked
    assert (
        cli(
            "register", "v3", "--embeddings", str(project.bundle("v3", project.embeddings(0.5, 4)))
        ).exit_code
        == 0
    )
    assert cli("promote", "v3", "--against", "v2").exit_code == 0
    r = cli("chain", "v3", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["lineage"] == ["v3", "v2", "v1"]
    pairs = {(p["query"], p["gallery"]): p for p in out["pairs"]}
    assert pairs[("v3", "v2")]["verdict"] == "pass" and pairs[("v3", "v2")]["kind"] == "edge"
    assert (
        pairs[("v3", "v1")]["verdict"] == "never checked"
        and pairs[("v3", "v1")]["kind"] == "transitive"
    )
    assert pairs[("v2", "v1")]["verdict"] == "pass"


def test_transitive_ancestor_is_checked(project):
    _setup(project, project.embeddings(0.8, 2))
    assert cli("promote", "v2", "--against", "v1").exit_code == 0
    project.contract("v3", parent="v2", transitive=("v1",))
    assert (
        cli(
            "register", "v3", "--embeddings", str(project.bundle("v3", project.embeddings(0.5, 4)))
        ).exit_code
        == 0
    )
    r = cli("promote", "v3", "--against", "v2", "--json")
    assert r.exit_code == 0, r.output
    assert {c["gallery"] for c in json.loads(r.stdout)["criteria"]} == {"v2", "v1"}
    pairs = {
        (p["query"], p["gallery"]): p["verdict"]
        for p in json.loads(cli("chain", "v3", "--json").stdout)["pairs"]
    }
    assert pairs[("v3", "v1")] == "pass"


def test_register_is_idempotent_and_refuses_other_weights(project):
    project.contract("v1")
    b = project.bundle("v1", project.embeddings(1.5, 1))
    assert cli("register", "v1", "--embeddings", str(b)).exit_code == 0
    r = cli("register", "v1", "--embeddings", str(b), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["created"] is False
    r = cli("register", "v1", "--embeddings", str(project.bundle("v1", project.embeddings(1.5, 5))))
    assert r.exit_code == 4 and "already registered" in r.stderr


def test_gain_uses_params_paragon_when_the_contract_names_none(project):
    """Issue 5: the update gain is measured against the paragon the contract or params name."""
    _setup(project, project.embeddings(0.8, 2))
    project.contract("v2p")
    assert cli("register", "v2p", "--embeddings", str(project.bundle("v2p", project.embeddings(0.5, 3)))).exit_code == 0  # fmt: skip
    r = cli("promote", "v2", "--against", "v1", "--json", "--dry-run")
    assert json.loads(r.stdout)["gain"] == {}  # neither contract nor params name one
    (project.root / "params.yaml").write_text(
        "evaluate:\n  chain: [v1, v2]\n  paragon: {v2: v2p}\n"
    )
    r = cli("promote", "v2", "--against", "v1", "--json", "--dry-run")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    gain = report["gain"]["identification"]["top1"]
    m = report["matrix"]["identification"]["top1"]
    expected = (m["v2"]["v1"] - m["v1"]["v1"]) / (m["v2p"]["v2p"] - m["v1"]["v1"])  # BCT Eq. 9
    assert gain["paragon"] == "v2p" and gain["value"] == pytest.approx(expected)
    (project.root / "params.yaml").write_text("evaluate:\n  paragon: {v2: [oops]}\n")
    r = cli("promote", "v2", "--against", "v1", "--dry-run")
    assert r.exit_code == 4 and "params.yaml: evaluate.paragon" in r.output


def test_against_a_version_while_production_is_unset_is_a_conflict(project):
    """Compare-and-set compares: an unset alias is not the version the gate compared against."""
    project.contract("v1")
    project.contract("v2", parent="v1")
    for v, emb in (("v1", project.embeddings(1.5, 1)), ("v2", project.embeddings(0.8, 2))):
        assert cli("register", v, "--embeddings", str(project.bundle(v, emb))).exit_code == 0
    r = cli("promote", "v2", "--against", "v1")
    assert r.exit_code == 6, r.output
    assert "production is unset, not 'v1'" in r.stderr
    assert Registry().production() is None
    assert PromotionLog("registry").promotions() == []
    # The first promotion is explicit: --against none (or no --against at all).
    r = cli("promote", "v2", "--against", "none")
    assert r.exit_code == 0, r.output
    assert Registry().production() == "v2"
    # --against none says "production is unset": now it is not.
    project.contract("v3", parent="v2")
    assert (
        cli(
            "register", "v3", "--embeddings", str(project.bundle("v3", project.embeddings(0.5, 3)))
        ).exit_code
        == 0
    )
    r = cli("promote", "v3", "--against", "none")
    assert r.exit_code == 6, r.output
    assert "production is 'v2', not unset" in r.stderr
    assert Registry().production() == "v2"


def test_an_unreadable_store_is_never_taken_for_an_unset_alias(project, monkeypatch):
    """A read error of the alias is exit 5, never "no production": nothing moves. (Reading the
    alias the old way, an error meant "unset" and production moved from v1 to v2.)"""
    from mlflow.exceptions import MlflowException

    _setup(project, project.embeddings(0.8, 2))
    assert Registry().production() == "v1"
    connect = Registry._connect

    class LockedReads:
        """The real client, except that reading the model or an alias fails as a locked
        sqlite store does (MLflow raises the same exception type as for a missing alias)."""

        def __init__(self, client):
            self.client = client

        def __getattr__(self, name):
            if name in ("get_registered_model", "get_model_version_by_alias"):

                def fail(*args, **kwargs):
                    raise MlflowException("(sqlite3.OperationalError) database is locked")

                return fail
            return getattr(self.client, name)

    with monkeypatch.context() as patch:
        patch.setattr(Registry, "_connect", lambda self: LockedReads(connect(self)))
        r = cli("promote", "v2", "--against", "v1")
    assert r.exit_code == 5, r.output
    assert "database is locked" in r.stderr
    assert Registry().production() == "v1"
    assert [p["to"] for p in PromotionLog("registry").promotions()] == ["v1"]


def test_a_locked_sqlite_store_is_not_an_unset_alias(project, monkeypatch):
    """The real thing: another process holds the sqlite database's write lock."""
    import sqlite3

    from compat.registry import embedded

    monkeypatch.setattr(embedded, "SQLITE_BUSY_TIMEOUT_S", 1.0)  # the wait is not what is tested

    _setup(project, project.embeddings(0.8, 2))
    db = sqlite3.connect(project.root / "registry" / "mlflow.db", timeout=1)
    db.execute("BEGIN EXCLUSIVE")
    try:
        r = cli("promote", "v2", "--against", "v1")
    finally:
        db.rollback()
        db.close()
    assert r.exit_code != 0, r.output
    assert r.exit_code in (5, 6), r.output
    assert Registry().production() == "v1"
