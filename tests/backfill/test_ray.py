"""``--engine ray`` on a local Ray runtime (one CPU): the same files as the local engine.

Run with ``pytest -m slow tests/backfill/test_ray.py``."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from compat.backfill.apply import backfill
from compat.embeddings.formats import write_shard
from compat.embeddings.reader import load_gallery
from compat.maps.psi import upgrade_array

ray = pytest.importorskip("ray")

# Starting a Ray runtime and its workers takes 30-90 s on a busy 2-core host: run with -m slow.
pytestmark = pytest.mark.slow


def test_ray_engine_writes_what_the_local_engine_writes(psi_and_gallery, local_ray):
    root, _, _, before = psi_and_gallery
    folder = root / "shards"
    folder.mkdir()
    ids = np.asarray(before.ids)
    for s in range(0, 50, 17):
        sl = slice(s, s + 17)
        versions = np.full(len(ids[sl]), "v1")
        write_shard(folder / f"p{s:03d}.parquet", ids[sl], before.embeddings[sl],
                    before.labels[sl], versions)  # fmt: skip
    kw = {"source": "v1", "target": "v2", "psi_dir": root / "models" / "v2" / "upgrade",
          "batch_size": 12, "progress": False}  # fmt: skip
    backfill(folder, root / "local", **kw)
    res = backfill(folder, root / "ray", engine="ray", **kw)
    assert (res.upgraded, res.batches) == (50, 5)
    names = sorted(p.name for p in (root / "local").iterdir())
    assert names == sorted(p.name for p in (root / "ray").iterdir())
    for name in names:
        if name.endswith(".parquet"):
            assert pq.read_table(root / "local" / name).equals(pq.read_table(root / "ray" / name))
    meta = [json.loads((root / f / "_compat.json").read_text()) for f in ("local", "ray")]
    for m in meta:
        m["meta"]["backfill"][0].pop("at")
    assert meta[0] == meta[1]


def test_ray_engine_takes_any_format_and_a_partial_backfill(psi_and_gallery, local_ray):
    root, psi, _, before = psi_and_gallery
    kw = {"source": "v1", "target": "v2", "psi_dir": root / "models" / "v2" / "upgrade",
          "batch_size": 7, "fraction": 0.4, "order": "random", "seed": 1, "progress": False}  # fmt: skip
    backfill(root / "g.npz", root / "local.npz", **kw)
    backfill(root / "g.npz", root / "ray.npz", engine="ray", **kw)
    a, b = load_gallery(root / "local.npz"), load_gallery(root / "ray.npz")
    assert a.row_versions == b.row_versions and a.row_versions.count("v2") == 20
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    up = np.array([v == "v2" for v in b.row_versions])
    np.testing.assert_array_equal(b.embeddings[up], upgrade_array(psi, before.embeddings)[up])
