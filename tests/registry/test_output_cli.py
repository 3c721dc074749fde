"""What the registry commands print, for people (never truncated, rounded, no None/True/False)
and for scripts (--json numbers as numbers, checks as objects, the GitHub step summary)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.contracts.gate import CHECK_FIELDS
from compat.registry.store import Registry

runner = CliRunner()

V1 = "v1-the-version-everyone-still-serves"  # long names: a table at 80 columns would cut them
V2 = "v2-its-backward-compatible-successor"


def cli(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


def _strip(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.fixture()
def promoted(project, tmp_path, monkeypatch):
    """V1 in production, V2 gated against it with a paragon; returns the --json report."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    project.contract(V1)
    project.contract(V2, parent=V1, paragon="v2p")
    project.contract("v2p")
    for name, noise, seed in ((V1, 1.5, 1), (V2, 0.8, 2), ("v2p", 0.5, 3)):
        bundle = project.bundle(name, project.embeddings(noise, seed))
        r = cli("register", name, "--embeddings", str(bundle))
        assert r.exit_code == 0, r.output
    assert cli("promote", V1).exit_code == 0
    summary = tmp_path / "step-summary.md"
    r = cli("promote", V2, "--against", V1, "--json", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), summary


def test_promote_json_has_checks_as_objects_and_a_step_summary(promoted):
    report, summary = promoted
    assert report["passed"] is True and report["moved"] is True
    assert len(report["checks"]) == 2
    for check in report["checks"]:
        assert set(check) == set(CHECK_FIELDS)  # one check object: every field, always
        assert check["gallery"] == V1 and check["verdict"] == "pass"
        for key in ("new", "baseline", "difference"):
            assert isinstance(check[key], float)
        assert check["difference"] == pytest.approx(check["new"] - check["baseline"], abs=1e-6)
    top1 = next(c for c in report["checks"] if c["metric"] == "top1")
    assert isinstance(top1["lower_bound"], float) and top1["lower_bound"] <= top1["difference"]
    gain = report["gain"]["identification"]["top1"]["value"]

    text = summary.read_text()
    assert text.startswith(f"### compat promote {V2} vs {V1}: PASSED (production -> {V2})")
    rows = [
        line for line in text.splitlines() if line.startswith(f"| identification | top1 | {V1}")
    ]
    assert top1["gain"] == gain and top1["gain_meaningful"] is True
    assert rows == [
        f"| identification | top1 | {V1} | cross > self_parent | 0 | 0.95 | {top1['new']:.4f} | "
        f"{top1['baseline']:.4f} | {top1['difference']:+.4f} | {top1['lower_bound']:+.4f} | "
        f"{100 * gain:.1f}% | pass |"
    ]
    assert sum(line.startswith("| ") for line in text.splitlines()) == 3  # header + 2 checks


def _assert_for_people(out: str) -> None:
    assert "…" not in out
    for word in ("None", "True", "False"):
        assert re.search(rf"\b{word}\b", out) is None, (word, out)


def test_promote_output_off_a_terminal_is_whole(promoted):
    report, _ = promoted
    r = cli("promote", V2, "--against", V1, "--dry-run", env={"COLUMNS": "40"})
    assert r.exit_code == 0, r.output
    out = r.stdout
    _assert_for_people(out)
    for check in report["checks"]:
        row = next(
            line
            for line in out.splitlines()
            if line.startswith(f"| {check['protocol']} | {check['metric']} |")
        )
        assert (
            f"| {check['new']:.4f} | {check['baseline']:.4f} | {check['difference']:+.4f} |" in row
        )
    assert re.search(r"update gain identification top1 vs v2p: \d+\.\d%", out)


def test_promote_on_a_narrow_terminal_wraps(promoted):
    report, _ = promoted
    r = cli(
        "promote", V2, "--against", V1, "--dry-run", env={"COLUMNS": "40", "TTY_COMPATIBLE": "1"}
    )
    assert r.exit_code == 0, r.output
    out = _strip(r.stdout)
    _assert_for_people(out)
    assert max(len(line) for line in out.splitlines()) <= 40
    words = out.split()
    for check in report["checks"]:
        assert f"{check['new']:.4f}" in words and f"{check['difference']:+.4f}" in words


def test_read_commands_json_numbers_are_numbers(promoted):
    report, _ = promoted
    r = cli("versions", "--json")
    assert r.exit_code == 0
    rows = {v["version"]: v for v in json.loads(r.stdout)["versions"]}
    assert rows[V2]["dim"] == 16 and isinstance(rows[V2]["mlflow_version"], int)
    assert rows[V2]["production"] is True and rows[V1]["production"] is False

    r = cli("show", V2, "--json")
    assert r.exit_code == 0
    info = json.loads(r.stdout)
    assert info["dim"] == 16 and info["parent"] == V1 and info["status"] == "promoted"
    # the gain object promote printed, read back from the compat.gains tag
    assert info["gain"] == report["gain"]
    checks = {(c["protocol"], c["metric"]): c for c in info["checks"]}
    tar = checks[("verification", "tar@far=0.1")]
    assert (
        tar["gallery"] == V1 and tar["verdict"] == "pass" and isinstance(tar["difference"], float)
    )

    r = cli("chain", V2, "--json")
    assert r.exit_code == 0
    (pair,) = json.loads(r.stdout)["pairs"]
    assert {(c["protocol"], c["metric"]) for c in pair["checks"]} == set(checks)
    assert all(isinstance(c["difference"], float) for c in pair["checks"])


def test_read_commands_for_people_are_whole(promoted):
    for args in (["versions"], ["show", V2], ["chain", V2], ["log"]):
        r = cli(*args, env={"COLUMNS": "40"})
        assert r.exit_code == 0, (args, r.output)
        _assert_for_people(r.stdout)
        assert V2 in r.stdout
    log = cli("log").stdout
    assert f"| (unset) | {V1} | committed |" in log and f"| {V1} | {V2} | committed |" in log
    show = cli("show", V2).stdout
    assert "compat.dim: 16" in show and "production: yes" in show


def test_stored_description_is_not_read_as_markup(promoted):
    reg = Registry()
    reg.set_description(reg.get(V2), "[ok] identification top1 [bold]as stored[/bold]")
    for env in ({}, {"TTY_COMPATIBLE": "1", "COLUMNS": "120"}):
        r = cli("show", V2, env=env)
        assert r.exit_code == 0
        assert "[ok] identification top1 [bold]as stored[/bold]" in _strip(r.stdout)


def test_a_promote_that_ends_in_an_error_says_so_in_the_step_summary(project, tmp_path):
    summary = tmp_path / "step-summary.md"
    r = cli("promote", "v9", "--against", "v1", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 3
    lines = summary.read_text().splitlines()
    assert lines[0] == "### compat promote v9: error (exit 3)"
    assert "v9.yaml" in lines[2]
