"""``compat register --embeddings`` takes every gallery format: .npy (+ sidecar) and Parquet
shards are registered as an .npz bundle, and the gate reads them like any other."""

from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.bundle import Sidecar, save_sidecar
from compat.embeddings.formats import write_shard

runner = CliRunner()


def test_register_from_npy_and_parquet_then_promote(project):
    project.contract("v1")
    project.contract("v2", parent="v1", dim=16)
    e1, e2 = project.embeddings(1.5, 1), project.embeddings(0.8, 2)
    ids = np.asarray(list(project.items))
    root = project.root / "bundles"
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "v1.npy", e1)
    save_sidecar(root / "v1.meta.npz", Sidecar(project.codes, ids, None, "v1", None, {}))
    (root / "v2").mkdir()
    write_shard(root / "v2" / "a.parquet", ids, e2, project.codes, None)
    for version, path in (("v1", root / "v1.npy"), ("v2", root / "v2")):
        r = runner.invoke(app, ["register", version, "--embeddings", str(path)])
        assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["promote", "v1"]).exit_code == 0
    r = runner.invoke(app, ["promote", "v2", "--against", "v1"])
    assert r.exit_code == 0, r.output


def test_no_command_leaves_a_temporary_folder(project, monkeypatch):
    """issue 30 item 3: a refused Parquet bundle left a compat-emb-* folder in TMPDIR. Every
    exit path of register (refused, registered, no-op) and promote leaves TMPDIR as it was."""
    import os
    import subprocess
    import sys

    scratch = project.root / "tmpdir"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)
    project.contract("v1")
    project.contract("v2", parent="v1", dim=16)
    ids = np.asarray(list(project.items))
    (project.root / "bundles" / "wide").mkdir()
    write_shard(project.root / "bundles" / "wide" / "a.parquet", ids,
                np.ones((len(ids), 8), np.float32), project.codes, None)  # fmt: skip
    r = runner.invoke(app, ["register", "v1", "--embeddings", "bundles/wide"])
    assert r.exit_code == 4 and "dimension 8 but" in r.output, r.output
    assert list(scratch.iterdir()) == []
    for version, seed in (("v1", 1), ("v2", 2)):
        folder = project.root / "bundles" / version
        folder.mkdir()
        write_shard(folder / "a.parquet", ids, project.embeddings(0.8, seed), project.codes, None)
        for _ in range(2):  # registered, then the same again: a no-op
            r = runner.invoke(app, ["register", version, "--embeddings", str(folder)])
            assert r.exit_code == 0, r.output
            assert list(scratch.iterdir()) == []
    env = {**os.environ, "TMPDIR": str(scratch)}
    for args in (["promote", "v1"], ["promote", "v2", "--against", "v1", "--dry-run"]):
        proc = subprocess.run([sys.executable, "-m", "compat.cli.main", *args], env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr
        assert list(scratch.iterdir()) == [], args
