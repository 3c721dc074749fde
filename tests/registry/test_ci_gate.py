"""scripts/ci_gate.py honours every option it accepts: one run passes every option and checks
each one's effect, and a test fails when the script accepts an option this file does not cover.

The end-to-end run against a DVC remote and an mlflow server on PostgreSQL is in
tests/registry/test_shared.py (marked slow: `pytest -m slow`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

GATE = Path(__file__).resolve().parents[2] / "scripts" / "ci_gate.py"


def _gate_module():
    spec = importlib.util.spec_from_file_location("ci_gate", GATE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ci_gate"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _run(args: list[str], cwd: Path, capsys) -> SimpleNamespace:
    """The script's main() in this process (as ``python scripts/ci_gate.py ARGS`` in ``cwd``)."""
    assert Path.cwd() == cwd
    code = _gate_module().main(args)
    out = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


# Every option of the script, and the line of the test below that proves it is honoured.
COVERED = {
    "candidate": "the candidate is v2, not the newest contract (v3)",
    "--dry-run": "production stays unset and nothing is recorded",
    "--no-pull": "no DVC remote exists, so a pull would fail with exit 5",
    "--embeddings-dir": "versions are registered from elsewhere/<v>.npz",
    "--contracts": "the contracts there require margin 0.5: FAIL, exit 1",
    "--params": "its evaluate.paragon names the paragon of the gain",
    "--bootstrap": "the report's bootstrap resamples are 37",
    "--report": "gate-report.json and gate-report.md are written there",
}


def test_every_option_of_the_script_is_covered_here():
    parser = _gate_module().build_parser()
    options = {a.option_strings[0] if a.option_strings else a.dest for a in parser._actions}
    options.discard("-h")
    assert options == set(COVERED), "an option of scripts/ci_gate.py has no test of its effect"


def test_every_option_changes_what_the_gate_does(project, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    root = project.root
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    for name, (noise, seed) in {"v1": (1.5, 1), "v2": (0.8, 2), "v3": (0.5, 3), "v2p": (0.4, 4)}.items():  # fmt: skip
        (elsewhere / f"{name}.npz").write_bytes(project.bundle(name, project.embeddings(noise, seed)).read_bytes())  # fmt: skip
    (root / "bundles" / "v2p.npz").unlink()  # only --embeddings-dir holds every bundle
    project.contract("v1")
    project.contract("v2", parent="v1")
    project.contract("v3", parent="v2")
    project.contract("v2p")
    strict = root / "strict"
    strict.mkdir()
    for name in ("v1", "v2", "v3", "v2p"):
        text = (root / "contracts" / f"{name}.yaml").read_text()
        (strict / f"{name}.yaml").write_text(text.replace("require: cross > self_parent", "require: cross > self_parent\n    margin: 0.5"))  # fmt: skip
    (root / "gate-params.yaml").write_text("evaluate:\n  chain: [v1, v2]\n  paragon: {v2: v2p}\n")
    args = ["v2", "--dry-run", "--no-pull", "--embeddings-dir", "elsewhere", "--contracts",
            "strict", "--params", "gate-params.yaml", "--bootstrap", "37", "--report", "out"]  # fmt: skip
    r = _run(args, root, capsys)
    assert r.returncode == 1, r.stdout + r.stderr  # --contracts: margin 0.5 cannot hold
    assert "registering v1 v2p v2" in r.stdout  # candidate v2; --params' paragon v2p
    report = json.loads((root / "out" / "gate-report.json").read_text())
    markdown = (root / "out" / "gate-report.md").read_text()
    assert report["version"] == "v2" and report["dry_run"] is True and not report["passed"]
    assert {c["margin"] for c in report["checks"]} == {0.5}
    assert report["bootstrap"]["resamples"] == 37
    assert report["paragon"] == "v2p"
    assert "FAILED" in markdown and "**FAIL**" in markdown and "| 0.5 |" in markdown
    from compat.registry.store import Registry

    reg = Registry()
    assert reg.production() is None  # --dry-run
    assert {v.name for v in reg.versions()} == {"v1", "v2", "v2p"}
    assert reg.get("v2").tags["compat.status"] == "candidate"  # nothing recorded
    # the same contracts through compat promote: the same verdict
    from typer.testing import CliRunner

    from compat.cli.main import app

    promote = ["promote", "v2", "--against", "none", "--contracts", "strict", "--dry-run"]
    res = CliRunner().invoke(app, [*promote, "--bootstrap", "37", "--params", "gate-params.yaml"])
    assert res.exit_code == 1, res.output


def test_the_report_records_an_error_when_no_verdict_was_reached(project, capsys):
    project.contract("v1")
    text = project.contract("v2", parent="v1").read_text()
    # forward > cross needs models/v2/upgrade/, which this project does not have: promote
    # stops with exit 3 after every version is registered
    project.contract("v2").write_text(text.replace("cross > self_parent", "forward > cross", 1))
    project.bundle("v1", project.embeddings(1.5, 1))
    project.bundle("v2", project.embeddings(0.8, 2))
    r = _run(
        ["v2", "--no-pull", "--embeddings-dir", "bundles", "--report", "out"], project.root, capsys
    )
    assert r.returncode == 3, r.stdout + r.stderr
    report = json.loads((project.root / "out" / "gate-report.json").read_text())
    assert report["exit_code"] == 3 and "upgrade" in report["error"]
    markdown = (project.root / "out" / "gate-report.md").read_text()
    assert markdown.startswith("### compat promote v2: error (exit 3)")
