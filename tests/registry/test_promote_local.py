"""``compat promote --dry-run --local V`` (issue 43 item 3): a pull request's candidate is gated
from its own files against the registry's versions, and nothing is registered, so a candidate
retrained on the same pull request never collides with an earlier registration of itself. A
dry run exits as the real run would (a stale --against: 6) and ends with one verdict line."""

from __future__ import annotations

import json

import pytest
from test_mlflow_model import _train_tiny  # tests/registry is on sys.path (conftest)
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.overlay import local_record
from compat.registry.store import Registry

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


def _production_v2(project) -> None:
    project.register("v1", noise=1.5, seed=1)
    assert cli("promote", "v1").exit_code == 0
    project.register("v2", parent="v1", noise=0.8, seed=2)
    assert cli("promote", "v2", "--against", "v1").exit_code == 0


def test_an_unregistered_candidate_is_gated_from_its_files_and_nothing_is_written(project):
    _production_v2(project)
    project.contract("v3", parent="v2")
    before = [(v.name, v.mlflow_version, dict(v.tags)) for v in Registry().versions()]
    log = Registry().ledger().lines()
    for seed in (3, 4):  # trained, then retrained on the same pull request: no collision
        project.bundle("v3", project.embeddings(0.5, seed))
        args = ["promote", "v3", "--against", "v2", "--dry-run", "--local", "v3"]
        r = cli(*args, "--embeddings-dir", "bundles", "--bootstrap", "100", "--json")
        assert r.exit_code == 0, r.output
        report = json.loads(r.stdout)
        assert (report["local"], report["dry_run"], report["passed"]) == (["v3"], True, True)
        assert report["would_move"] is True and report["run_id"] is None
        assert {c["gallery"] for c in report["checks"]} == {"v2"}
        after = [(v.name, v.mlflow_version, dict(v.tags)) for v in Registry().versions()]
        assert after == before and Registry().ledger().lines() == log  # nothing written
    r = cli("promote", "v3", "--against", "v2", "--dry-run", "--local", "v3",
            "--embeddings-dir", "bundles", "--bootstrap", "100")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == (
        "PASSED: dry run, nothing recorded; the real run moves production -> v3"
    )


def test_a_dry_run_with_a_stale_against_exits_as_the_real_run(project):
    _production_v2(project)
    project.contract("v3", parent="v2")
    project.bundle("v3", project.embeddings(0.5, 3))
    local = ["--local", "v3", "--embeddings-dir", "bundles", "--bootstrap", "100"]
    r = cli("promote", "v3", "--against", "v1", "--dry-run", *local)
    assert r.exit_code == 6, r.output  # production is v2: the real run would stop there too
    assert "production is 'v2', not 'v1'" in r.stderr
    r = cli("promote", "v3", "--dry-run", *local)
    assert r.exit_code == 2 and "--against v2" in r.stderr
    r = cli("promote", "v2", "--against", "v2", "--dry-run", "--bootstrap", "100")
    assert r.exit_code == 0, r.output  # already production: the real run moves nothing either
    assert "v2 is already production; nothing to move" in r.stdout
    assert r.stdout.splitlines()[-1] == "PASSED: dry run, nothing recorded; production unchanged"


@pytest.mark.slow  # the default run checks this through faster tests; -m slow runs it
def test_local_needs_a_dry_run_and_a_registered_name_keeps_its_weights(project):
    _production_v2(project)
    r = cli("promote", "v2", "--against", "v2", "--local", "v2")
    assert r.exit_code == 2 and "--local" in r.stderr and "dry run" in r.stderr
    r = cli("promote", "v2", "--against", "v2", "--dry-run", "--embeddings-dir", "bundles")
    assert r.exit_code == 2 and "--embeddings-dir" in r.stderr
    project.bundle("v2", project.embeddings(0.7, 9))  # retrained under a registered name
    r = cli("promote", "v2", "--against", "v2", "--dry-run", "--local", "v2",
            "--embeddings-dir", "bundles")  # fmt: skip
    assert r.exit_code == 4, r.output  # as its registration would be
    assert "already registered" in r.stderr and "register the new weights under a new" in r.stderr


@pytest.mark.slow  # the default run checks this through faster tests; -m slow runs it
def test_a_trained_version_reads_as_its_registration_would(project):
    """models/<v>/: the tags the overlay gives equal the ones registration writes."""
    _train_tiny(project.root)
    project.contract("v1")
    rec = local_record("v1", project.root / "models", project.root / "contracts")
    assert cli("register", "v1").exit_code == 0
    registered = Registry().get("v1").tags
    assert {k: registered[k] for k in rec.tags} == rec.tags
    assert rec.run_id is None and rec.artifacts == {}
    weights = project.root / "models" / "v1" / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    r = cli("promote", "v1", "--dry-run", "--local", "v1")
    assert r.exit_code == 4 and "sha256 does not match" in r.stderr
