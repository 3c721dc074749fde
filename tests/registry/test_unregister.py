"""``compat unregister`` (issue 43 item 5): a bad registration is undone without the MLflow UI
and logged; a version that is or was production, or is another's parent, is refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.store import Registry

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


def _register(project, name: str, noise: float, seed: int, parent: str | None = None) -> None:
    project.contract(name, parent=parent)
    bundle = project.bundle(name, project.embeddings(noise, seed))
    r = cli("register", name, "--embeddings", str(bundle))
    assert r.exit_code == 0, r.output


def test_a_bad_registration_is_undone_logged_and_the_name_is_free_again(project, monkeypatch):
    monkeypatch.setenv("COMPAT_ACTOR", "bob")
    _register(project, "v1", 1.5, 1)
    assert cli("promote", "v1").exit_code == 0
    _register(project, "v2", 0.8, 2, parent="v1")
    mlflow_version = Registry().get("v2").mlflow_version
    run_id = Registry().get("v2").run_id
    # other weights under the registered name: refused, as before
    other = project.bundle("v2", project.embeddings(0.7, 9))
    assert cli("register", "v2", "--embeddings", str(other)).exit_code == 4

    r = cli("unregister", "v2", "--why", "registered from the wrong bundle", "--json")
    assert r.exit_code == 0, r.output
    entry = json.loads(r.stdout)
    assert (entry["kind"], entry["state"], entry["version"], entry["who"]) == (
        "unregister", "unregistered", "v2", "bob"
    )  # fmt: skip
    assert entry["mlflow_version"] == int(mlflow_version)
    reg = Registry()
    assert reg.find("v2") is None and [v.name for v in reg.versions()] == ["v1"]
    tags = reg.call("get_run", run_id).data.tags  # the run stays, and says why
    assert tags["compat.unregistered"].endswith("by bob: registered from the wrong bundle")
    log = json.loads(cli("log", "--json").stdout)["promotions"]
    assert [(p.get("kind"), p["state"]) for p in log] == [(None, "committed"), ("unregister", "unregistered")]  # fmt: skip
    table = cli("log").stdout
    assert "| bob | unregister | - | v2 | unregistered |" in table
    assert cli("verify").exit_code == 0  # production is where the log says: nothing drifted

    assert cli("register", "v2", "--embeddings", str(other)).exit_code == 0
    assert Registry().get("v2").mlflow_version != mlflow_version
    assert cli("promote", "v2", "--against", "v1").exit_code == 0
    assert Registry().production() == "v2"


def test_history_is_never_unregistered(project):
    _register(project, "v1", 1.5, 1)
    _register(project, "v2", 0.8, 2, parent="v1")
    r = cli("unregister", "v1", "--why", "x")
    assert r.exit_code == 6, r.output
    assert "v2 names v1 as its parent: unregister it first" in r.stderr
    assert cli("promote", "v1").exit_code == 0
    assert cli("promote", "v2", "--against", "v1").exit_code == 0
    for name in ("v1", "v2"):  # v2 is production; v1 was
        r = cli("unregister", name, "--why", "x")
        assert r.exit_code == 6, r.output
        assert f"unregister {name}: refused: {name} is or was production" in r.stderr
    assert {v.name for v in Registry().versions()} == {"v1", "v2"}
    assert all(p.get("kind") != "unregister" for p in Registry().ledger().promotions())


@pytest.mark.slow  # the default run checks this through faster tests; -m slow runs it
def test_usage_and_not_found(project):
    _register(project, "v1", 1.5, 1)
    assert cli("unregister", "v9", "--why", "x").exit_code == 3
    assert cli("unregister", "v1", "--why", "  ").exit_code == 2
    assert cli("unregister", "v1").exit_code == 2  # --why is required
    assert cli("unregister", "../v1", "--why", "x").exit_code == 4
    assert Registry().find("v1") is not None
