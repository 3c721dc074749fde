"""Issue 31 item 8: the read commands (versions, show, chain, log, verify) serve a registry
folder nobody can write to, and change nothing in it; the write commands (register, promote)
refuse it with one line naming the folder (exit 5).

Root ignores permission bits, so the folder is made read-only for real: a read-only bind mount
of itself (skipped where mounting is not allowed).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compat.cli.main import app

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture()
def read_only() -> Iterator[Callable[[Path], None]]:
    """``read_only(folder)``: remount ``folder`` on itself, read-only (EROFS for everyone)."""
    mounted: list[Path] = []

    def mount(folder: Path) -> None:
        if os.geteuid() != 0:
            pytest.skip("a read-only bind mount needs root")
        proc = subprocess.run(
            ["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {proc.stderr.strip()}")
        mounted.append(folder)
        proc = subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {proc.stderr.strip()}")
        with pytest.raises(OSError):  # really read-only, root included
            (folder / "probe").write_text("x")

    yield mount
    for folder in reversed(mounted):  # lazily: MLflow's pooled connections may hold it open
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


def snapshot(folder: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under ``folder``: kind, modification time and content digest."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[str(p.relative_to(folder))] = ("dir" if p.is_dir() else "file", st.st_mtime_ns, digest)
    return out


def _two_promotions(project) -> None:
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    assert cli("promote", "v1").exit_code == 0
    r = cli("promote", "v2", "--against", "v1")
    assert r.exit_code == 0, r.output


def _reads_right(origin: Path) -> None:
    """Every read command, exit 0, with the registry's content (production v2 after v1);
    ``origin``: the project whose registry/artifacts the versions' sources must name."""
    r = cli("versions", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["versions"]
    assert [(v["version"], v["production"]) for v in rows] == [("v1", False), ("v2", True)]
    r = cli("show", "v2", "--json")
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    assert shown["production"] and shown["status"] == "promoted" and shown["parent"] == "v1"
    assert shown["source"].startswith((origin / "registry" / "artifacts").as_uri())
    r = cli("chain", "v2", "--json")
    assert r.exit_code == 0, r.output
    chain = json.loads(r.stdout)
    assert chain["lineage"] == ["v2", "v1"]
    assert {p["verdict"] for p in chain["pairs"]} == {"pass"}
    r = cli("log", "--json")
    assert r.exit_code == 0, r.output
    log = json.loads(r.stdout)["promotions"]
    assert [(p["from"], p["to"], p["state"]) for p in log] == [
        (None, "v1", "committed"),
        ("v1", "v2", "committed"),
    ]
    r = cli("verify", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["production"] == "v2"
    for args in (["versions"], ["show", "v2"], ["chain"], ["log"], ["verify"]):
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)
        assert r.stderr == "", (args, r.stderr)


def test_read_commands_serve_a_read_only_registry(project, read_only):
    _two_promotions(project)
    folder = project.root / "registry"
    before = snapshot(folder)
    read_only(folder)
    _reads_right(project.root)
    assert snapshot(folder) == before  # no lock file, no journal, no UPDATE


def test_write_commands_refuse_a_read_only_registry_naming_it(project, read_only):
    _two_promotions(project)
    project.contract("v3", parent="v2")
    bundle = project.bundle("v3", project.embeddings(0.8, 3))
    folder = project.root / "registry"
    before = snapshot(folder)
    read_only(folder)
    for args in (
        ["register", "v3", "--embeddings", str(bundle)],
        ["promote", "v1", "--rollback", "--against", "v2"],
        ["verify", "--repair"],
    ):
        r = cli(*args)
        assert r.exit_code == 5, (args, r.output)
        [line] = r.stderr.splitlines()
        assert line.startswith(f"error: {folder}: ") and "read-only" in line.lower(), line
    assert snapshot(folder) == before


def test_a_copied_read_only_registry_reads_its_own_artifacts(
    project, read_only, tmp_path_factory, monkeypatch
):
    """A copy whose store still names the original's artifact folder (never opened writable
    since it was copied) is re-pointed at its own in a scratch copy, not in place."""
    _two_promotions(project)
    copy = tmp_path_factory.mktemp("copy") / "project"
    shutil.copytree(project.root, copy, symlinks=True)
    original = snapshot(project.root / "registry")
    folder = copy / "registry"
    before = snapshot(folder)
    read_only(folder)
    monkeypatch.chdir(copy)
    _reads_right(copy)
    assert snapshot(folder) == before
    assert snapshot(project.root / "registry") == original


def test_a_read_creates_no_registered_model(registry_template, tmp_path):
    """A store without the registered model reads as empty (a read never creates it)."""
    import sqlite3

    from compat.registry.store import Registry

    root = tmp_path / "registry"
    shutil.copytree(registry_template, root)
    reg = Registry(root=root, model="other", read_only=True)
    assert reg.versions() == [] and reg.production() is None and reg.find("v1") is None
    with sqlite3.connect(root / "mlflow.db") as con:
        names = [r[0] for r in con.execute("SELECT name FROM registered_models")]
    assert "other" not in names
