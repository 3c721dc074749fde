"""Issue 29 item 1: the read commands read the registry without mlflow
(:mod:`compat.registry.reader`), and every answer equals the slow reference, MlflowClient's
(``Registry(read_only=True)``), on a registry written by the normal path. The same on a real
mlflow server and its PostgreSQL database is in test_shared.py, which starts that server once."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from test_read_only_registry import read_only, snapshot  # noqa: F401  (a fixture)
from typer.testing import CliRunner

import compat.cli.registry_read as read_commands
from compat.cli.main import app
from compat.registry.reader import KNOWN_SCHEMAS, RegistryReader, open_registry
from compat.registry.store import Registry

runner = CliRunner()
READ_COMMANDS = (
    ["versions", "--json"],
    ["show", "v1", "--json"],
    ["show", "v2", "--json"],
    ["show", "v3", "--json"],
    ["chain", "--json"],
    ["chain", "v3", "--json"],
    ["log", "--json"],
    ["verify", "--json"],
)


def cli(*args: str):
    return runner.invoke(app, list(args))


def _story(project) -> None:
    """v1 -> v2 -> v3 registered by the normal (mlflow) path; v1 then v2 promoted, v3 gated
    and failed: every tag the read commands print is there."""
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    project.register("v3", parent="v2", noise=3.0, seed=3)
    assert cli("promote", "v1").exit_code == 0
    for args in (["v2", "--against", "v1"], ["v3", "--against", "v2"]):
        r = cli("promote", *args, "--bootstrap", "50")
        assert r.exit_code in (0, 1), r.output


def _same_answers(fast: Registry, slow: Registry) -> None:
    """Every read the commands make, equal between the reader and MLflow's client."""
    asdict = dataclasses.asdict
    assert [asdict(r) for r in fast.versions()] == [asdict(r) for r in slow.versions()]
    for name in ("v1", "v2", "v3", "v9"):
        got, want = fast.find(name), slow.find(name)
        assert (got and asdict(got)) == (want and asdict(want)), name
    assert fast.production() == slow.production()
    assert fast.production_mlflow_version() == slow.production_mlflow_version()


def _mlflow_registry(uri: str | None, read: bool = False) -> Registry:
    """The registry as the commands opened it before the reader: MLflow's client."""
    return Registry(uri=uri, root="registry", read_only=read)


def _same_commands(monkeypatch) -> None:
    """Every read command's --json (and its exit code) through the reader and through MLflow."""
    fast = [cli(*args) for args in READ_COMMANDS]
    with monkeypatch.context() as patch:
        patch.setattr(read_commands, "named_registry", _mlflow_registry)
        slow = [cli(*args) for args in READ_COMMANDS]
    for args, f, s in zip(READ_COMMANDS, fast, slow, strict=True):
        assert (f.exit_code, f.stderr) == (s.exit_code, s.stderr), args
        assert json.loads(f.stdout) == json.loads(s.stdout), args


def test_the_reader_answers_as_mlflow_on_sqlite(project, monkeypatch):
    _story(project)
    reader = open_registry(None)
    assert isinstance(reader, RegistryReader)
    _same_answers(reader, Registry(read_only=True))
    _same_commands(monkeypatch)
    # another model in the same store: none registered, nothing created
    _same_answers(RegistryReader(model="other"), Registry(model="other", read_only=True))


def test_the_reader_answers_as_mlflow_on_a_named_sqlite_file(project, tmp_path, monkeypatch):
    _story(project)
    uri = f"sqlite:///{project.root / 'registry' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    _same_answers(RegistryReader(uri), Registry(uri, read_only=True))
    _same_commands(monkeypatch)
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert RegistryReader(missing).versions() == []  # and no file made
    assert not (tmp_path / "none.db").exists()


READ_ONLY_SCRIPT = """
import sys
from typer.testing import CliRunner
from compat.cli.main import app
codes = [CliRunner().invoke(app, args).exit_code for args in {commands}]
heavy = sorted(m for m in ("mlflow", "torch", "sqlalchemy") if m in sys.modules)
print(codes, heavy)
"""


def test_the_read_commands_import_no_mlflow(project):
    _story(project)
    args = [["versions"], ["show", "v2"], ["chain"], ["log"], ["verify"], ["verify", "--json"]]
    script = READ_ONLY_SCRIPT.format(commands=args)
    r = subprocess.run(
        [sys.executable, "-c", script], cwd=project.root, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{[0] * len(args)} []", r.stdout


def test_a_dry_run_imports_no_mlflow_where_nothing_is_downloaded(project):
    """A gate whose rows need no registry artifact (here: a root version) reads through the
    reader alone; a registered bundle is still downloaded through MLflow."""
    project.register("v1", noise=1.5, seed=1)
    script = READ_ONLY_SCRIPT.format(commands=[["promote", "v1", "--dry-run"]])
    r = subprocess.run(
        [sys.executable, "-c", script], cwd=project.root, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[0] []", r.stdout


def test_a_dry_run_serves_a_read_only_registry(project, read_only):  # noqa: F811
    """A dry run records nothing, so a registry folder nobody can write to serves it (the
    promotion itself is refused there, exit 5)."""
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    assert cli("promote", "v1").exit_code == 0
    folder = project.root / "registry"
    before = snapshot(folder)
    read_only(folder)
    r = cli("promote", "v2", "--against", "v1", "--dry-run", "--bootstrap", "50", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["dry_run"] and report["passed"] and not report["moved"]
    r = cli("promote", "v2", "--against", "v1", "--bootstrap", "50")
    assert r.exit_code == 5, r.output
    assert snapshot(folder) == before


def test_a_schema_no_installed_mlflow_reads_gets_mlflows_advice_in_one_line(project):
    """A registry at a revision neither the reader nor this MLflow knows (one a newer MLflow
    wrote, say) is handed to MLflow, whose refusal is one line with its own advice (exit 5),
    the database untouched; a database with no schema table at all likewise."""
    project.register("v1", noise=1.5, seed=1)
    db = project.root / "registry" / "mlflow.db"
    with sqlite3.connect(db) as con:
        con.execute("UPDATE alembic_version SET version_num = 'f00dfeedbeef'")
    before = db.read_bytes()
    for args in (["versions"], ["show", "v1"], ["chain", "v1"], ["log"], ["verify"]):
        r = cli(*args)
        assert r.exit_code == 5, (args, r.output)
        [line] = r.stderr.splitlines()
        assert line.startswith(f"error: registry sqlite:///{db}: MLflow "), line
        assert "revision f00dfeedbeef" in line and "mlflow db upgrade" in line, line
    assert db.read_bytes() == before
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE alembic_version")
    r = cli("versions")
    assert r.exit_code == 5 and len(r.stderr.splitlines()) == 1, r.output


def test_the_known_schema_is_the_installed_mlflow_schema():
    """An mlflow upgrade that moves the schema fails here: check the reader's SQL against the
    new tables, then add the revision to KNOWN_SCHEMAS."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    config = _get_alembic_config("sqlite://")
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head in KNOWN_SCHEMAS


def test_a_damaged_or_missing_store_reads_as_before(project):
    """No store: versions says so (exit 0), show exits 3; a damaged one is exit 5 naming it."""
    db = project.root / "registry" / "mlflow.db"
    db.unlink()
    assert cli("versions").exit_code == 0
    assert cli("show", "v1").exit_code == 3
    db.write_bytes(b"not a database at all, certainly not SQLite")
    for args in (["versions"], ["show", "v1"], ["log"], ["verify"]):
        r = cli(*args)
        assert r.exit_code == 5 and str(db) in r.stderr, (args, r.output)
    assert db.read_bytes().startswith(b"not a database")


def test_a_copied_store_names_its_own_artifacts(project, tmp_path_factory, monkeypatch):
    import shutil

    project.register("v1", noise=1.5, seed=1)
    copy = tmp_path_factory.mktemp("copy") / "project"
    shutil.copytree(project.root, copy)
    monkeypatch.chdir(copy)
    before = (copy / "registry" / "mlflow.db").read_bytes()
    shown = json.loads(cli("show", "v1", "--json").stdout)
    assert shown["source"].startswith((copy / "registry" / "artifacts").as_uri() + "/")
    assert (copy / "registry" / "mlflow.db").read_bytes() == before  # re-pointed in memory
    assert Path(shown["source"].removeprefix("file://")).is_dir()


def test_a_schema_the_reader_does_not_know_is_read_through_mlflow(project, monkeypatch):
    """A database at a revision outside KNOWN_SCHEMAS (another MLflow release's) is read by
    MLflow's own client: the same answers and the same --json, only slower."""
    import compat.registry.reader as reader_module

    _story(project)
    monkeypatch.setattr(reader_module, "KNOWN_SCHEMAS", ())
    fallback = open_registry(None)
    assert not isinstance(fallback, RegistryReader)
    _same_answers(fallback, Registry(read_only=True))
    fast = [cli(*args) for args in READ_COMMANDS]
    assert all(r.exit_code in (0, 1) for r in fast), [r.output for r in fast]
