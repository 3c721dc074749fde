"""scripts/ci_gate.py honours every option it accepts, and works as a real repository's CI needs
(issue 43 item 3): a pull request's dry run writes nothing to the registry (its candidate is
gated from its own files, so a re-run or a retrained candidate never collides), the candidate
is named (an input or a file), a fork's pull request is skipped with exit 0, the verdict is
posted as a pull request comment (edited on a re-run, never duplicated), and a rollback runs by
manual dispatch with its accepted loss logged.

The script runs as the workflow runs it, ``python scripts/ci_gate.py`` in a subprocess, for the
paths a pull request takes; the options' effects are checked in-process (one import of mlflow
for many runs). The run against a DVC remote and an mlflow server on PostgreSQL is in
tests/registry/test_shared.py (marked slow: ``pytest -m slow``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from compat.registry.store import Registry

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


def _script(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python scripts/ci_gate.py ARGS`` in ``cwd``, as the workflow's step runs it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "MLFLOW_TRACKING"))}  # fmt: skip
    return subprocess.run([sys.executable, str(GATE), *args], cwd=cwd, env={**clean, **env},
                          capture_output=True, text=True, timeout=300)  # fmt: skip


# Every option of the script, and the test below that proves it is honoured.
COVERED = {
    "candidate": "the candidate is v2, not contracts/candidate.txt's v3",
    "--candidate-file": "test_the_candidate_is_named_never_guessed: other.txt names v9",
    "--dry-run": "the registry is left as it was: no version, no log line",
    "--rollback": "test_a_rollback_by_manual_dispatch_logs_its_accepted_loss",
    "--accept-loss": "test_a_rollback_by_manual_dispatch_logs_its_accepted_loss",
    "--no-pull": "no DVC remote exists, so a pull would fail with exit 5",
    "--embeddings-dir": "versions are read from elsewhere/<v>.npz",
    "--contracts": "the contracts there require margin 0.5: FAIL, exit 1",
    "--params": "its evaluate.paragon names the paragon of the gain",
    "--bootstrap": "the report's bootstrap resamples are 37",
    "--report": "gate-report.json and gate-report.md are written there",
    "--comment": "test_a_pull_request_gates_without_writing_and_comments_once",
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
    (root / "contracts" / "candidate.txt").write_text("v3\n")
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
    # candidate v2; --params' paragon v2p; --dry-run: nothing registered, all from files
    assert "candidate v2; from the registry: -; from files: v1 v2p v2" in r.stdout
    report = json.loads((root / "out" / "gate-report.json").read_text())
    markdown = (root / "out" / "gate-report.md").read_text()
    assert report["version"] == "v2" and report["dry_run"] is True and not report["passed"]
    assert report["local"] == ["v1", "v2", "v2p"]
    assert {c["margin"] for c in report["checks"]} == {0.5}
    assert report["bootstrap"]["resamples"] == 37
    assert report["paragon"] == "v2p"
    assert "FAILED" in markdown and "**FAIL**" in markdown and "| 0.5 |" in markdown
    reg = Registry()
    assert reg.production() is None and reg.versions() == []  # --dry-run: nothing written
    assert reg.ledger().lines() == []
    # the same contracts through compat promote: the same verdict
    from typer.testing import CliRunner

    from compat.cli.main import app

    promote = ["promote", "v2", "--against", "none", "--contracts", "strict", "--dry-run"]
    local = ["--local", "v1", "--local", "v2", "--local", "v2p", "--embeddings-dir", "elsewhere"]
    res = CliRunner().invoke(app, [*promote, *local, "--bootstrap", "37", "--params", "gate-params.yaml"])  # fmt: skip
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
    assert "candidate v2; registering v1 v2" in r.stdout  # not a dry run: registered
    report = json.loads((project.root / "out" / "gate-report.json").read_text())
    assert report["exit_code"] == 3 and "upgrade" in report["error"]
    markdown = (project.root / "out" / "gate-report.md").read_text()
    assert markdown.startswith("### compat promote v2: error (exit 3)")


@pytest.mark.slow  # the default run checks this through faster tests; -m slow runs it
def test_a_rollback_by_manual_dispatch_logs_its_accepted_loss(project, capsys, monkeypatch):
    from test_rollback import _chain

    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    _chain(project, v3_noise=1.3)  # production v3, whose rows v2's queries do worse on
    common = ["v2", "--no-pull", "--embeddings-dir", "bundles", "--bootstrap", "50"]
    r = _run(common, project.root, capsys)
    assert r.returncode == 6, r.stdout + r.stderr  # a rollback needs --rollback
    r = _run([*common, "--rollback"], project.root, capsys)
    assert r.returncode == 1, r.stdout + r.stderr  # it loses on v3's rows
    assert "to accept the loss on v3's rows, write in contracts/v2.yaml" in r.stdout
    monkeypatch.setenv("COMPAT_ACTOR", "carol")
    r = _run([*common, "--rollback", "--accept-loss", "INC-9"], project.root, capsys)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED: production -> v2 (rollback)" in r.stdout
    last = Registry().ledger().promotions()[-1]
    assert (last["to"], last["kind"]) == ("v2", "rollback")
    assert (last["accepted_loss"]["who"], last["accepted_loss"]["why"]) == ("carol", "INC-9")


class GitHub:
    """A local stand-in for the GitHub REST API's issue comments (every request recorded)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict]] = []
        self.comments: list[dict] = [{"id": 1, "body": "a reviewer's comment"}]
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict:
                return json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")

            def do_GET(self) -> None:
                api.requests.append(("GET", self.path, {}))
                self._answer(api.comments)

            def do_POST(self) -> None:
                body = self._body()
                api.requests.append(("POST", self.path, body))
                api.comments.append({"id": len(api.comments) + 1, **body})
                self._answer(api.comments[-1])

            def do_PATCH(self) -> None:
                body = self._body()
                api.requests.append(("PATCH", self.path, body))
                cid = int(self.path.rsplit("/", 1)[1])
                next(c for c in api.comments if c["id"] == cid).update(body)
                self._answer(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture()
def github():
    api = GitHub()
    yield api
    api.server.shutdown()


def _event(root: Path, head: str, number: int = 7) -> dict[str, str]:
    path = root / "event.json"
    repo = lambda name: {"repo": {"full_name": name}}  # noqa: E731
    path.write_text(json.dumps({"pull_request": {"number": number, "head": repo(head), "base": repo("team/compat")}}))  # fmt: skip
    return {"GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(path),
            "GITHUB_REPOSITORY": "team/compat", "GITHUB_STEP_SUMMARY": str(root / "summary.md")}  # fmt: skip


def test_a_pull_request_gates_without_writing_and_comments_once(project, github):
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1", noise=0.8, seed=2)
    reg = Registry()
    reg.set_production(reg.get("v2"))
    project.contract("v3", parent="v2")
    (project.root / "contracts" / "candidate.txt").write_text("# the release under review\nv3\n")
    before = [(v.name, v.mlflow_version, v.tags) for v in Registry().versions()]
    env = {**_event(project.root, "team/compat"), "GITHUB_TOKEN": "t0ken", "GITHUB_API_URL": github.url}  # fmt: skip
    args = ["--dry-run", "--no-pull", "--embeddings-dir", "bundles", "--report", "gate",
            "--comment", "--bootstrap", "50"]  # fmt: skip
    for seed in (3, 4):  # the candidate, then the candidate retrained on the same pull request
        project.bundle("v3", project.embeddings(0.5, seed))
        r = _script(args, project.root, env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "candidate v3; from the registry: v1 v2; from files: v3" in r.stdout
        assert [(v.name, v.mlflow_version, v.tags) for v in Registry().versions()] == before
        assert Registry().ledger().lines() == []
    posted = [(m, p) for m, p, _ in github.requests if m != "GET"]
    assert posted == [("POST", "/repos/team/compat/issues/7/comments"),
                      ("PATCH", "/repos/team/compat/issues/comments/2")]  # fmt: skip
    [ours] = [c for c in github.comments if c["id"] == 2]
    assert ours["body"].startswith("<!-- compat-gate -->\n### compat promote v3 vs v2: PASSED")
    assert "the real run moves production -> v3" in ours["body"]
    assert "verdict comment edited on pull request #7" in r.stdout
    assert "### compat promote v3 vs v2: PASSED" in (project.root / "summary.md").read_text()
    report = json.loads((project.root / "gate" / "gate-report.json").read_text())
    assert report["local"] == ["v3"] and report["dry_run"] is True

    # other weights under a registered name in the pull request: refused as registering would be
    project.bundle("v2", project.embeddings(0.7, 9))
    r = _script(args, project.root, env)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "version 'v2' is already registered" in r.stderr


def test_a_fork_is_skipped_before_anything_is_read(project, github):
    env = {**_event(project.root, "someone/compat"), "GITHUB_TOKEN": "t", "GITHUB_API_URL": github.url}  # fmt: skip
    # no --no-pull and no candidate file: a real gate would fail (exit 5, exit 2); a fork's is
    # skipped first
    r = _script(["--dry-run", "--report", "gate", "--comment"], project.root, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped: pull request from the fork someone/compat" in r.stdout
    assert (project.root / "summary.md").read_text().startswith("### compat gate: skipped")
    assert json.loads((project.root / "gate" / "gate-report.json").read_text())["exit_code"] == 0
    assert github.requests == []  # a fork's token may not comment: nothing tried


def test_the_candidate_is_named_never_guessed(project):
    project.contract("v1")
    project.contract("v3-paragon")  # the newest contract by name: never picked
    r = _script(["--dry-run", "--no-pull"], project.root, {})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no candidate" in r.stderr and "contracts/candidate.txt" in r.stderr
    (project.root / "other.txt").write_text("# comment\nv9   # next release\n")
    r = _script(["--dry-run", "--no-pull", "--candidate-file", "other.txt"], project.root, {})
    assert r.returncode == 3, r.stdout + r.stderr  # v9 named: its files are looked for
    assert "candidate v9" in r.stdout and "models/v9" in r.stderr
