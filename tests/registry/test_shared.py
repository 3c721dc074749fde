"""Issue 14 item 3: a shared registry (an ``mlflow server`` on PostgreSQL) is a tested deployment.

Working copies on different machines share nothing but the server and its database: the
promotion lock (an advisory lock) and the log (a table) live in that database. One PostgreSQL
and one mlflow server per module (``shared_server``); each test starts from an empty registry.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_reader import _same_answers, _same_commands, _story
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.reader import RegistryReader
from compat.registry.store import Registry

runner = CliRunner()
N = 8


@pytest.fixture()
def shared(shared_server, project, monkeypatch):
    shared_server.reset()
    for key, value in shared_server.env.items():
        monkeypatch.setenv(key, value)
    shutil.rmtree(project.root / "registry")  # nothing local: the registry is the server
    return shared_server


def cli(*args: str):
    return runner.invoke(app, list(args))


def _copies(project, tmp_path_factory, n: int) -> list[Path]:
    """``n`` separate working copies of the project, each with its own (empty) registry/."""
    out = []
    for i in range(n):
        dst = tmp_path_factory.mktemp(f"copy{i}") / "project"
        shutil.copytree(project.root, dst, ignore=shutil.ignore_patterns("registry"))
        (dst / "registry").mkdir()
        out.append(dst)
    return out


def _spawn(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "compat.cli.main", *args],
        cwd=cwd,
        env={**os.environ, **env, "COMPAT_ACTOR": f"ci-{cwd.parent.name}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _logs(copies: list[Path], monkeypatch) -> list[list[dict]]:
    out = []
    for copy in copies:
        monkeypatch.chdir(copy)
        r = cli("log", "--json")
        assert r.exit_code == 0, r.output
        out.append(json.loads(r.stdout)["promotions"])
    return out


def _chain(project):
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    assert cli("promote", "v1").exit_code == 0
    r = cli("promote", "v2", "--against", "v1")
    assert r.exit_code == 0, r.output


# The default run races two copies' registrations on the server
# (test_two_copies_race_one_registration); three copies gating two candidates and eight copies of
# one promotion, each a process importing compat and MLflow, are the long checks.
@pytest.mark.slow
def test_eight_copies_race_one_promotion(shared, project, tmp_path_factory, monkeypatch):
    _chain(project)
    project.register("v3", parent="v2", noise=0.5, seed=3)
    copies = _copies(project, tmp_path_factory, N)
    args = ["promote", "v3", "--against", "v2", "--json", "--bootstrap", "50"]
    procs = [_spawn(args, c, shared.env) for c in copies]
    results = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]
    for code, out, err in results:
        assert code in (0, 6), err
        assert "Traceback" not in err
        if code == 0:
            assert json.loads(out)["passed"]
    moved = [json.loads(out)["moved"] for code, out, _ in results if code == 0]
    assert moved.count(True) == 1, results
    for code, out, _ in results:
        if code == 0 and not json.loads(out)["moved"]:
            assert "already production" in " ".join(json.loads(out)["messages"])
    assert Registry().production() == "v3"
    logs = _logs([project.root, *copies], monkeypatch)
    assert all(log == logs[0] for log in logs)  # one log, read the same from every copy
    assert [(p["from"], p["to"], p["state"]) for p in logs[0]] == [
        (None, "v1", "committed"),
        ("v1", "v2", "committed"),
        ("v2", "v3", "committed"),
    ]
    assert not list(copies[0].joinpath("registry").iterdir())  # nothing local was used
    assert cli("verify").exit_code == 0


@pytest.mark.slow  # ~30-45 s: three processes gate two candidates on one server (the default run races registrations on it, and promotions on one machine in tests/registry/test_concurrency.py)
def test_two_candidates_race(shared, project, tmp_path_factory, monkeypatch):
    _chain(project)
    project.register("v3a", parent="v2", noise=0.5, seed=3)
    project.register("v3b", parent="v2", noise=0.5, seed=4)
    copies = _copies(project, tmp_path_factory, 3)
    procs = {
        (c, name): _spawn(["promote", name, "--against", "v2", "--bootstrap", "50"], c, shared.env)
        for c, name in zip(copies, ["v3a", "v3b", "v3a"], strict=True)
    }
    results = {k: (p.wait(timeout=600), p.stderr.read()) for k, p in procs.items()}
    winner = Registry().production()
    assert winner in ("v3a", "v3b")
    for (_, name), (code, err) in results.items():
        if name == winner:
            assert code == 0, err
        else:
            assert code == 6, err
            assert f"production is '{winner}'" in err
    logs = _logs(copies, monkeypatch)
    assert all(log == logs[0] for log in logs)
    assert [(p["from"], p["to"], p["state"]) for p in logs[0]][-1] == ("v2", winner, "committed")
    assert len(logs[0]) == 3


def test_two_copies_race_one_registration(shared, project, tmp_path_factory):
    """Two machines register one name at once: the advisory lock makes one MLflow version
    (each copy's registry/ folder is its own, so no file lock could serialise them)."""
    project.contract("v4")
    project.bundle("v4", project.embeddings(0.8, 4))
    copies = _copies(project, tmp_path_factory, 2)
    slow = Path(__file__).with_name("slow_register.py")  # every lookup that misses sleeps 2 s
    args = [sys.executable, str(slow), "2", "register", "v4", "--embeddings", "bundles/v4.npz"]
    procs = [
        subprocess.Popen(
            args,
            cwd=c,
            env={**os.environ, **shared.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for c in copies
    ]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    assert [code for code, _, _ in results] == [0, 0], results
    assert sum("already registered (same weights)" in out for _, out, _ in results) == 1
    assert [r.name for r in Registry().versions()] == ["v4"]


@pytest.mark.slow  # ~30 s: the server killed and restarted mid-promotion (the default run repairs killed promotions in tests/registry/test_kill_promote.py)
def test_server_killed_mid_promotion(shared, project, monkeypatch):
    _chain(project)
    project.register("v3", parent="v2", noise=0.5, seed=3)
    real = Registry.set_production

    def crash(self, rec):
        shared.server.kill()  # SIGKILL between logging "pending" and moving the alias
        return real(self, rec)

    with monkeypatch.context() as patch:
        patch.setattr(Registry, "set_production", crash)
        r = cli("promote", "v3", "--against", "v2")
    assert r.exit_code == 5, r.output
    assert shared.server.uri in r.stderr
    log = Registry().ledger().promotions()
    assert [p["state"] for p in log] == ["committed", "committed", "pending"]  # never "committed"
    shared.restart_server()
    reg = Registry()
    assert reg.production() == "v2"
    assert reg.get("v3").tags["compat.status"] == "passed"  # the verdict, not "promoted"
    r = cli("promote", "v3", "--against", "v2")
    assert r.exit_code == 0, r.output
    log = Registry().ledger().promotions()
    assert [(p["to"], p["state"], p.get("recovered", False)) for p in log] == [
        ("v1", "committed", False),
        ("v2", "committed", False),
        ("v3", "aborted", True),
        ("v3", "committed", False),
    ]
    assert Registry().production() == "v3"
    assert cli("verify").exit_code == 0


GATE = Path(__file__).resolve().parents[2] / "scripts" / "ci_gate.py"


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    pythonpath = os.pathsep.join(filter(None, [str(GATE.parents[1]), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **env, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=600,
    )


# Every option of the script runs in the default suite, in-process on a local registry
# (tests/registry/test_ci_gate.py); this run through DVC and the server is the long check.
@pytest.mark.slow
def test_ci_gate_script_end_to_end(shared, project, tmp_path_factory, monkeypatch):
    """The workflow's gate (scripts/ci_gate.py) on a fresh CI checkout: the versions come from
    a DVC remote, every version the contract needs is registered, production moves once."""
    project.contract("v1")
    project.contract("v2", parent="v1")
    project.contract("v3p")  # the paragon: no parent, only registered
    project.contract("v3", parent="v2", transitive=("v1",), paragon="v3p")
    for name, (noise, seed) in {"v1": (1.5, 1), "v2": (0.8, 2), "v3": (0.5, 3), "v3p": (0.4, 4)}.items():  # fmt: skip
        project.bundle(name, project.embeddings(noise, seed))
    remote = tmp_path_factory.mktemp("dvc-remote")
    dvc = [sys.executable, "-m", "dvc"]
    for cmd in (
        ["init", "--no-scm", "-q"],
        ["remote", "add", "-d", "local", str(remote)],
        ["add", "-q", *sorted(f"bundles/{p.name}" for p in (project.root / "bundles").iterdir())],
        ["push", "-q"],
    ):
        r = _run(dvc + cmd, project.root, {})
        assert r.returncode == 0, (cmd, r.stderr)
    # a CI runner's checkout: the code and the .dvc files, no data, no DVC cache, no registry
    checkout = tmp_path_factory.mktemp("checkout") / "project"
    shutil.copytree(
        project.root, checkout, ignore=shutil.ignore_patterns("*.npz", "cache", "registry")
    )
    assert not list((checkout / "bundles").glob("*.npz"))
    gate = [sys.executable, str(GATE), "v3", "--embeddings-dir", "bundles", "--bootstrap", "50"]
    r = _run(gate, checkout, shared.env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "registering v1 v2 v3p v3" in r.stdout
    assert "PASSED: production -> v3" in r.stdout
    monkeypatch.chdir(checkout)
    assert {v.name for v in Registry().versions()} == {"v1", "v2", "v3", "v3p"}
    assert Registry().production() == "v3"
    # run again: identical weights re-register as no-ops, production is already v3
    r = _run(gate, checkout, shared.env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "already registered (same weights)" in r.stdout
    assert "already production" in r.stdout
    log = Registry().ledger().promotions()
    assert [(p["from"], p["to"], p["state"]) for p in log] == [(None, "v3", "committed")]
    # other weights under a registered name: exit 4 naming both digests
    from compat.io import sha256_file

    registered = Registry().get("v2").tags["compat.weights_sha256"]
    project.root = checkout
    other = project.bundle("v2", project.embeddings(0.8, 99))
    r = _run([*gate, "--no-pull"], checkout, shared.env)
    assert r.returncode == 4, r.stdout + r.stderr
    assert registered in r.stderr and sha256_file(other) in r.stderr


def test_a_remote_server_without_a_shared_lock_refuses_to_move_anything(
    shared, project, monkeypatch
):
    """Issue 30 case 16: without COMPAT_REGISTRY_DATABASE each machine would keep its own lock
    and log (eight runners split their logs); writes are refused (exit 3) unless the user
    chooses a per-machine lock, and reads go on."""
    monkeypatch.delenv("COMPAT_REGISTRY_DATABASE")
    project.contract("v1")
    bundle = str(project.bundle("v1", project.embeddings(1.5, 1)))
    r = cli("register", "v1", "--embeddings", bundle)
    assert r.exit_code == 3, r.output
    [line] = r.stderr.splitlines()
    assert "COMPAT_REGISTRY_DATABASE is not set" in line and "COMPAT_LOCAL_LOCK=1" in line
    assert cli("versions").exit_code == 0  # reads need no lock
    monkeypatch.setenv("COMPAT_LOCAL_LOCK", "1")  # "promote and register from one place only"
    r = cli("register", "v1", "--embeddings", bundle)
    assert r.exit_code == 0, r.output
    monkeypatch.delenv("COMPAT_LOCAL_LOCK")
    r = cli("promote", "v1")
    assert r.exit_code == 3 and "COMPAT_REGISTRY_DATABASE is not set" in r.stderr, r.output
    assert Registry().production() is None
    monkeypatch.setenv("COMPAT_LOCAL_LOCK", "1")
    assert cli("promote", "v1").exit_code == 0


def test_a_stalled_log_table_is_an_error_within_the_statement_timeout(shared, monkeypatch):
    """Issue 30 case 10: a database that accepts the connection and then stalls (the log table
    locked by a stuck session) ends a read of the log within the statement timeout, exit 5."""
    import time

    import psycopg

    from compat.errors import InfrastructureError
    from compat.registry import shared as ledger_module

    monkeypatch.setattr(ledger_module, "STATEMENT_TIMEOUT_S", 1)
    ledger = ledger_module.PostgresLedger(shared.pg.url, "compat")
    with ledger.lock():  # the first lock creates the table
        pass
    with psycopg.connect(shared.pg.url) as stuck:  # a transaction left open, holding the table
        stuck.execute(f"LOCK TABLE {ledger_module.TABLE} IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(InfrastructureError, match=r"unreachable \(read\): .*statement timeout"):
            ledger.lines()
        assert time.monotonic() - started < 10


def test_the_reader_answers_as_mlflow_on_a_server_and_its_database(shared, project, monkeypatch):
    """The reader (test_reader.py) on the shared deployment: the REST API of a real mlflow
    server, and its PostgreSQL database named as the tracking URI."""
    _story(project)
    server, database = shared.server.uri, shared.pg.url
    _same_answers(RegistryReader(server), Registry(server, read_only=True))
    _same_answers(RegistryReader(database), Registry(server, read_only=True))
    _same_commands(monkeypatch)
    run_id = Registry(server).get("v2").run_id
    assert RegistryReader(server).run_url(run_id) == Registry(server).run_url(run_id)
