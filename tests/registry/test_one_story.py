"""Every output that reports a verdict tells the same story: the same check fields in promote,
show, chain and the step summary, and an update gain that never contradicts a failed check."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from compat.cli.main import app
from compat.contracts.gate import CHECK_FIELDS

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


def _project(project, margin: float | None = None):
    project.contract("v1")
    project.contract("v2p")
    text = project.contract("v2", parent="v1", paragon="v2p").read_text()
    if margin is not None:
        text = text.replace("require: cross > self_parent", f"require: cross > self_parent\n    margin: {margin}")  # fmt: skip
        project.contract("v2").write_text(text)
    for name, noise, seed in (("v1", 1.5, 1), ("v2", 0.8, 2), ("v2p", 0.5, 4)):
        bundle = project.bundle(name, project.embeddings(noise, seed))
        assert cli("register", name, "--embeddings", str(bundle)).exit_code == 0
    assert cli("promote", "v1").exit_code == 0


def test_a_failed_check_makes_the_gain_not_meaningful_and_names_it(project, tmp_path, monkeypatch):
    _project(project, margin=0.5)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    r = cli("promote", "v2", "--against", "v1", "--bootstrap", "200")
    assert r.exit_code == 1
    assert "criterion holds" not in r.stdout
    lines = [line for line in r.stdout.splitlines() if line.startswith("update gain")]
    assert lines and all(
        ", not meaningful: check failed: identification top1 vs v1:" in x for x in lines
    )
    r = cli("promote", "v2", "--against", "v1", "--bootstrap", "200", "--dry-run", "--json")
    report = json.loads(r.stdout)
    for gain in (g for per in report["gain"].values() for g in per.values()):
        assert gain["value"] > 0 and gain["meaningful"] is False
        assert gain["reason"].startswith("check failed: ") and "margin 0.5" in gain["reason"]
    assert all(c["gain_meaningful"] is False for c in report["checks"] if c["gain"] is not None)
    assert "criterion holds" not in summary.read_text()


def test_promote_show_chain_and_the_summary_carry_the_same_checks(project, tmp_path, monkeypatch):
    _project(project)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    r = cli("promote", "v2", "--against", "v1", "--bootstrap", "200", "--json")
    assert r.exit_code == 0, r.output
    promoted = json.loads(r.stdout)["checks"]
    assert promoted and all(set(c) == set(CHECK_FIELDS) for c in promoted)
    top1 = next(c for c in promoted if c["metric"] == "top1")
    assert None not in (top1["new"], top1["baseline"], top1["lower_bound"], top1["gain"])
    shown = json.loads(cli("show", "v2", "--json").stdout)["checks"]
    pairs = json.loads(cli("chain", "v2", "--json").stdout)["pairs"]
    assert shown == promoted
    assert pairs[0]["checks"] == promoted and pairs[0]["verdict"] == "pass"
    # for people: the same row layout in every command
    row = (
        f"| identification | top1 | v1 | cross > self_parent | 0 | 0.95 | {top1['new']:.4f} | "
        f"{top1['baseline']:.4f} | {top1['difference']:+.4f} | {top1['lower_bound']:+.4f} | "
        f"{100 * top1['gain']:.1f}% | pass |"
    )
    assert row in summary.read_text().splitlines()
    assert row in cli("show", "v2").stdout.splitlines()
    assert f"| v2 {row}" in cli("chain", "v2").stdout.splitlines()


def test_a_gain_above_100_percent_is_flagged_never_a_bound():
    from compat.compare.matrix import PARAGON_WEAKER, update_gain

    g = update_gain(0.75, 0.5, 0.625)  # the version beats its own paragon (binary fractions)
    assert g.value == 2.0 and g.meaningful is False and g.reason == PARAGON_WEAKER
    assert update_gain(0.625, 0.5, 0.625).meaningful  # exactly 100%: the paragon's own result


def test_a_failed_check_on_an_older_gallery_makes_that_pairs_gains_not_meaningful(project):
    """The pair rule holds for every gallery, not only the parent's: v3's top-1 check on v1
    passes, its verification check there fails, so its top-1 gain on v1 means nothing."""
    project.contract("v1")
    project.contract("v2", parent="v1")
    project.contract("v3p")
    text = project.contract("v3", parent="v2", transitive=("v1",), paragon="v3p").read_text()
    text = text.replace("metric: tar@far=0.1\n    require: cross > self_parent",
                        "metric: tar@far=0.1\n    require: cross > self_parent\n    margin: 0.9")  # fmt: skip
    project.contract("v3").write_text(text)
    for name, noise, seed in (("v1", 1.5, 1), ("v2", 0.8, 2), ("v3", 0.5, 3), ("v3p", 0.3, 4)):
        bundle = project.bundle(name, project.embeddings(noise, seed))
        assert cli("register", name, "--embeddings", str(bundle)).exit_code == 0
    r = cli("promote", "v3", "--against", "v2", "--bootstrap", "200", "--dry-run", "--json")
    assert r.exit_code == 1, r.output
    checks = {(c["gallery"], c["protocol"]): c for c in json.loads(r.stdout)["checks"]}
    top1 = checks[("v1", "identification")]
    assert top1["verdict"] == "pass" and top1["gain"] is not None  # passes on its own
    assert checks[("v1", "verification")]["verdict"] == "fail"
    assert top1["gain_meaningful"] is False


def test_the_summary_links_the_versions_run_on_a_dry_run_too(project, tmp_path, monkeypatch):
    from compat.registry.store import Registry

    _project(project)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run_id = Registry().get("v2").run_id
    # an sqlite store has no UI address: the run id finds it
    r = cli("promote", "v2", "--against", "v1", "--bootstrap", "50", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["run_id"] == run_id
    assert summary.read_text().rstrip().endswith(f"MLflow run of v2: `{run_id}`")
    # a tracking server: the run's page, credentials hidden
    monkeypatch.setattr(Registry, "call", _get_run_in_experiment_7)
    url = Registry("http://alice:s3cret@mlflow.internal:5000/").run_url(run_id)
    assert url == f"http://alice:***@mlflow.internal:5000/#/experiments/7/runs/{run_id}"
    assert Registry().run_url(run_id) is None


def _get_run_in_experiment_7(self, name, *args, **kwargs):
    from types import SimpleNamespace

    assert name == "get_run", name
    return SimpleNamespace(info=SimpleNamespace(experiment_id="7"))
