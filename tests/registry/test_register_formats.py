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
