"""Issue 14 items 4, 5, 7, 8: drift, relocatable registries, conflicts, unreachable stores,
version names."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.promotions import PromotionLog
from compat.registry.store import Registry

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


# --- item 4: drift ------------------------------------------------------------------------------


def test_an_alias_moved_outside_compat_is_drift(project):
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    project.register("v3", parent="v2", noise=0.5, seed=3)
    assert cli("promote", "v1").exit_code == 0
    r = cli("verify", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["production"] == "v1"
    # someone uses MLflow's UI: production -> v2 with no gate and no log entry
    reg = Registry()
    reg.set_production(reg.get("v2"))
    r = cli("verify")
    assert r.exit_code == 6
    assert "production is 'v2'" in r.stderr and "'v1'" in r.stderr
    r = cli("verify", "--json")  # a script gets an object with drift too; the code says so
    assert r.exit_code == 6 and r.stderr == ""
    found = json.loads(r.stdout)
    assert found["drift"] is True and (found["production"], found["logged"]) == ("v2", "v1")
    assert "production is 'v2'" in found["message"]
    read_cmds = (["versions"], ["log"], ["show", "v2"], ["chain"], ["versions", "--json"],
                 ["log", "--json"], ["show", "v2", "--json"], ["chain", "--json"])  # fmt: skip
    for cmd in read_cmds:
        r = cli(*cmd)
        assert r.exit_code == 0 and r.stderr.startswith("warning: drift:"), cmd
        assert "drift" not in r.stdout, cmd
    # the same warning, the same stream, in promote: a dry run and a real one
    r = cli("promote", "v3", "--against", "v2", "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith("warning: drift:") and "drift" not in r.stdout
    r = cli("promote", "v3", "--against", "v2", "--dry-run", "--json")
    assert json.loads(r.stdout)["warnings"][0].startswith("drift:")
    r = cli("promote", "v3", "--against", "v2")
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith("warning: drift:") and "drift" not in r.stdout
    # the gate's own move makes the log and the alias agree again
    assert cli("verify").exit_code == 0
    assert "drift" not in cli("versions").stderr


def test_an_alias_set_by_hand_on_an_empty_log_is_drift(project):
    project.register("v1", noise=1.5, seed=1)
    assert cli("verify").exit_code == 0  # unset and nothing logged agree
    reg = Registry()
    reg.set_production(reg.get("v1"))
    r = cli("verify")
    assert r.exit_code == 6 and "production is 'v1'" in r.stderr and "no committed move" in r.stderr


# --- item 5: relocatable registries ---------------------------------------------------------------


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_a_copied_project_never_touches_the_original(project, tmp_path_factory, monkeypatch):
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    assert cli("promote", "v1").exit_code == 0
    original = project.root
    before = _tree_digest(original)
    copy = tmp_path_factory.mktemp("clone") / "project"
    shutil.copytree(original, copy)
    monkeypatch.chdir(copy)
    project.root = copy
    project.register("v3", parent="v2", noise=0.5, seed=3)
    r = cli("promote", "v2", "--against", "v1")
    assert r.exit_code == 0, r.output
    assert cli("promote", "v3", "--against", "v2").exit_code == 0
    assert _tree_digest(original) == before  # byte-identical: nothing read or written there
    reg = Registry()
    artifacts = (copy / "registry" / "artifacts").as_uri()
    for name in ("v1", "v2", "v3"):
        assert reg.get(name).source.startswith(artifacts), name
    assert list((copy / "registry" / "artifacts").rglob("promote-*.json"))
    # the original still works on its own files
    monkeypatch.chdir(original)
    assert Registry().production() == "v1"
    assert Registry().get("v2").source.startswith((original / "registry" / "artifacts").as_uri())


# --- item 7: conflicts are not outages ---------------------------------------------------------


class _Flaky:
    """The real client, except that tag writes fail with the server's unique violation."""

    def __init__(self, client, failures: int):
        self.client, self.failures = client, failures

    def __getattr__(self, name):
        attr = getattr(self.client, name)
        if name != "set_model_version_tag":
            return attr

        def flaky(*args, **kwargs):
            if self.failures > 0:
                self.failures -= 1
                from mlflow.exceptions import MlflowException

                raise MlflowException(
                    "(psycopg.errors.UniqueViolation) duplicate key value violates unique "
                    'constraint "model_version_tag_pk"'
                )
            return attr(*args, **kwargs)

        return flaky


def test_a_write_conflict_is_retried(project, monkeypatch):
    project.register("v1", noise=1.5, seed=1)
    reg = Registry()
    monkeypatch.setattr("compat.registry.store.time.sleep", lambda s: None)
    reg._client = _Flaky(reg.client, failures=3)
    reg.set_tags(reg.get("v1"), {"compat.note": "x"})
    assert Registry().get("v1").tags["compat.note"] == "x"


def test_a_persistent_write_conflict_is_exit_6_not_5(project, monkeypatch):
    project.register("v1", noise=1.5, seed=1)
    connect = Registry._connect
    monkeypatch.setattr("compat.registry.store.time.sleep", lambda s: None)
    monkeypatch.setattr(Registry, "_connect", lambda self: _Flaky(connect(self), failures=10**6))
    r = cli("promote", "v1")
    assert r.exit_code == 6, r.output
    assert "model_version_tag_pk" in r.stderr and "conflict" in r.stderr


# --- item 8: unreachable is fast and clean; names are validated -----------------------------------


def test_an_unreachable_server_leaves_nothing_behind(tmp_path, monkeypatch):
    """Exit 5 naming the URI, and no registry/ lock file or temporary folder left behind."""
    import numpy as np

    from compat.embeddings.bundle import EmbeddingBundle, save_bundle

    project, scratch = tmp_path / "project", tmp_path / "tmp"
    project.mkdir(), scratch.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # this test's own temporary folder
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    (project / "contracts").mkdir()
    (project / "contracts" / "v1.yaml").write_text("version: v1\nembedding_dim: 4\nhead: cosface\n")
    emb = np.eye(4, dtype=np.float32)
    save_bundle(
        project / "v1.npz",
        EmbeddingBundle(embeddings=emb, labels=np.arange(4), ids=list("abcd"), version="v1"),
    )
    commands = (
        ["register", "v1", "--embeddings", "v1.npz"],
        ["versions"],
        ["promote", "v1"],
        ["log"],
        ["verify"],
    )
    for args in commands:
        r = cli(*args, "--registry-uri", "http://127.0.0.1:9")
        assert r.exit_code == 5, (args, r.output)
        assert "http://127.0.0.1:9" in r.stderr
    # verify --json prints its object even when the registry cannot be read
    r = cli("verify", "--json", "--registry-uri", "http://127.0.0.1:9")
    assert r.exit_code == 5
    found = json.loads(r.stdout)
    assert found["error"] == 5 and found["drift"] is None and "127.0.0.1:9" in found["message"]
    assert sorted(os.listdir(project)) == ["contracts", "v1.npz"]  # no registry/.schema.lock
    assert os.listdir(scratch) == []  # no compat-* folder


def test_a_sqlite_uri_in_a_missing_folder_is_not_found(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/nope/mlflow.db"
    r = cli("versions", "--registry-uri", uri)
    assert r.exit_code == 3, r.output
    assert "nope" in r.stderr
    assert not (tmp_path / "nope").exists() and not (tmp_path / "registry").exists()


@pytest.mark.parametrize("name", ["../v1", "a/b", "v1..x", "none", ".hidden", "a\\b", ""])
def test_version_names_are_validated(project, name):
    commands = [["register", name], ["promote", name]]
    if name != "none":  # --against none is the first promotion
        commands.append(["promote", "v1", "--against", name])
    for args in commands:
        r = cli(*args)
        assert r.exit_code == 4, (args, r.output)
        assert "version name" in r.stderr
    assert PromotionLog("registry").lines() == []


def test_a_server_that_never_answers_is_exit_5_within_the_timeout(tmp_path, monkeypatch):
    """A black-holed server (it accepts the connection, then says nothing) must not hang the
    gate: the request timeout bounds the wait."""
    import socket
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes handshakes; nobody ever reads or answers
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        r = cli("versions", "--registry-uri", uri)
        elapsed = time.monotonic() - start
    assert r.exit_code == 5, r.output
    assert uri in r.stderr
    assert elapsed < 30, elapsed  # one 2 s timeout (no retries), not a hang
    assert os.listdir(tmp_path) == []


def test_a_corrupt_log_fails_log_but_not_the_version_listing(project):
    project.register("v1", noise=1.5, seed=1)
    assert cli("promote", "v1").exit_code == 0
    log = PromotionLog("registry").path
    log.write_bytes(b"{not json\n" + log.read_bytes())  # corruption, not a torn last line
    r = cli("versions", "--json")
    assert r.exit_code == 0 and "promotion log not read" in r.stderr
    assert "v1" in r.stdout
    r = cli("log")
    assert r.exit_code == 4 and "promotions.jsonl:1" in r.stderr


def test_shared_backend_selection_and_urls(tmp_path, monkeypatch):
    """Which ledger a registry uses, and the PostgreSQL URL forms (no server needed)."""
    from compat.registry.shared import PostgresLedger, lock_key, plain_url, redacted

    assert plain_url("postgresql+psycopg2://u:p@h:5/db") == "postgresql://u:p@h:5/db"
    assert plain_url("postgres://h/db") == "postgresql://h/db"
    assert redacted("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"
    assert lock_key("compat") == lock_key("compat") != lock_key("other")
    assert -(2**63) <= lock_key("compat") < 2**63
    monkeypatch.delenv("COMPAT_REGISTRY_DATABASE", raising=False)
    assert isinstance(Registry(root=tmp_path).ledger(), PromotionLog)  # the sqlite default
    remote = Registry(uri="http://mlflow:5000", root=tmp_path)
    assert isinstance(remote.ledger(), PromotionLog)  # no database named: local lock and log
    monkeypatch.setenv("COMPAT_REGISTRY_DATABASE", "postgresql://u:pw@db/mlflow")
    ledger = Registry(uri="http://mlflow:5000", root=tmp_path).ledger()
    assert isinstance(ledger, PostgresLedger) and "pw" not in ledger.where
    assert isinstance(Registry(root=tmp_path).ledger(), PromotionLog)  # the default ignores it
    direct = Registry(uri="postgresql+psycopg://u@db/mlflow", root=tmp_path).ledger()
    assert isinstance(direct, PostgresLedger) and direct.url == "postgresql://u@db/mlflow"
    assert os.listdir(tmp_path) == []


def test_an_unreachable_promotion_log_database_is_exit_5(tmp_path):
    from compat.errors import InfrastructureError
    from compat.registry.shared import PostgresLedger

    ledger = PostgresLedger("postgresql://u:secret@127.0.0.1:9/db", "compat")
    with pytest.raises(InfrastructureError, match=r"127\.0\.0\.1:9/db is unreachable") as err:
        ledger.promotions()
    assert "secret" not in str(err.value)


# --- issue 30 cases 6 and 12: a damaged embedded store is exit 5, never an empty registry -----


def _zero_bytes(reg: Path) -> None:
    (reg / "mlflow.db").write_bytes(b"")


def _a_folder(reg: Path) -> None:
    (reg / "mlflow.db").mkdir()


def _a_loop(reg: Path) -> None:
    (reg / "mlflow.db").symlink_to("mlflow.db")


def _dangling(reg: Path) -> None:
    (reg / "mlflow.db").symlink_to("gone.db")


def _not_sqlite(reg: Path) -> None:
    (reg / "mlflow.db").write_bytes(b"PK\x03\x04 a zip, not a database")


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (_zero_bytes, "mlflow.db: empty (0 bytes), not a registry"),
        (_a_folder, "mlflow.db: not a file"),
        (_a_loop, "mlflow.db: a symlink that leads nowhere"),
        (_dangling, "mlflow.db: a symlink that leads nowhere"),
        (_not_sqlite, "mlflow.db: not an SQLite database"),
        (None, "registry: not a folder"),
    ],
)
def test_a_damaged_store_is_exit_5_and_left_as_it_is(tmp_path, monkeypatch, damage, said):
    import time

    import numpy as np

    from compat.embeddings.bundle import EmbeddingBundle, save_bundle

    monkeypatch.chdir(tmp_path)
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "v1.yaml").write_text(
        "version: v1\nembedding_dim: 4\nhead: cosface\n"
    )
    bundle = EmbeddingBundle(np.eye(4, dtype=np.float32), np.arange(4), list("abcd"), version="v1")
    save_bundle(tmp_path / "v1.npz", bundle)
    reg = tmp_path / "registry"
    if damage is None:
        reg.write_text("a file where the registry folder should be")
    else:
        reg.mkdir()
        damage(reg)
    before = _snapshot(reg)
    for args in (["versions"], ["show", "v1"], ["chain", "v1"], ["log"], ["verify", "--json"],
                 ["register", "v1", "--embeddings", "v1.npz"]):  # fmt: skip
        start = time.monotonic()
        r = cli(*args)
        assert r.exit_code == 5, (args, r.output)
        assert time.monotonic() - start < 10, args  # no retries against a folder (was 105 s)
        [line] = r.stderr.splitlines()
        assert said in line and "Traceback" not in r.output, (args, line)
    assert _snapshot(reg) == before  # nothing created over it, nothing changed


def _snapshot(reg: Path) -> object:
    """What is at ``reg``: a file's bytes, or each entry of the folder (links as links)."""
    if not reg.is_dir():
        return reg.read_bytes()

    def entry(p: Path) -> object:
        if p.is_symlink():
            return ("link", os.readlink(p))
        return ("dir",) if p.is_dir() else ("file", p.read_bytes())

    return {p.name: entry(p) for p in reg.iterdir() if p.name != ".schema.lock"}


def test_a_database_tracking_uri_at_a_closed_port_is_exit_5_at_once(tmp_path, monkeypatch):
    """Issue 30 case 10: MLflow retried a refused PostgreSQL connection for ~100 s."""
    import socket
    import time

    monkeypatch.chdir(tmp_path)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"postgresql+psycopg://alice:s3cret@127.0.0.1:{port}/mlflow"
    for args in (["versions"], ["log"], ["verify"]):
        start = time.monotonic()
        r = cli(*args, "--registry-uri", uri)
        assert r.exit_code == 5, (args, r.output)
        assert time.monotonic() - start < 15, args
        [line] = r.stderr.splitlines()
        assert f"alice:***@127.0.0.1:{port}" in line and "s3cret" not in r.output


def test_every_later_database_connection_has_a_bounded_timeout():
    """Issue 30 case 10: after the first check, the engine MLflow builds from the tracking URI
    also waits at most CONNECT_TIMEOUT_S per connection (libpq's connect_timeout), unless the
    URI names its own."""
    from compat.registry.shared import CONNECT_TIMEOUT_S, with_connect_timeout

    t = f"connect_timeout={CONNECT_TIMEOUT_S}"
    assert with_connect_timeout("postgresql://u:p@h:5432/db") == f"postgresql://u:p@h:5432/db?{t}"
    assert with_connect_timeout("postgresql+psycopg://h/db?sslmode=require") == (
        f"postgresql+psycopg://h/db?sslmode=require&{t}"
    )
    assert with_connect_timeout("postgresql://h/db?connect_timeout=3").endswith("=3")
