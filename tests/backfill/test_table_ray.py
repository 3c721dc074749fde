"""``--engine ray`` on a table gallery, on a local Ray runtime (one CPU): each fragment a Ray
task that reads, maps and writes it; the table ends as the local engine leaves it.

Run with ``pytest -m slow tests/backfill/test_table_ray.py``."""

from __future__ import annotations

import shutil

import lance
import pytest

import compat.embeddings.table_write as table_write
from compat.backfill.table import backfill_table
from compat.embeddings.table_write import import_gallery

ray = pytest.importorskip("ray")

# Starting a Ray runtime and its workers takes 30-90 s on a busy 2-core host: run with -m slow.
pytestmark = pytest.mark.slow


def test_ray_engine_fills_the_table_the_local_engine_fills(tmp_path, kit, monkeypatch, local_ray):
    monkeypatch.setattr(table_write, "ROWS_PER_FRAGMENT", 64)
    kit.make_psi(tmp_path / "psi")
    kit.make_gallery(tmp_path / "g.npz", n=300)
    import_gallery(tmp_path / "g.npz", tmp_path / "local.lance")
    shutil.copytree(tmp_path / "local.lance", tmp_path / "ray.lance")
    for fraction in (0.4, 1.0):
        kw = {"source": "v1", "target": "v2", "psi_dir": tmp_path / "psi", "fraction": fraction,
              "order": "random", "seed": 1, "batch_size": 24}  # fmt: skip
        a = backfill_table(tmp_path / "local.lance", **kw)
        b = backfill_table(tmp_path / "ray.lance", engine="ray", **kw)
        assert (a.upgraded, a.batches) == (b.upgraded, b.batches)
        got = [lance.dataset(tmp_path / f"{e}.lance") for e in ("local", "ray")]
        assert got[0].to_table().equals(got[1].to_table())
        assert got[0].schema.equals(got[1].schema, check_metadata=True)
