"""Issue 31 item 2: the registry on a full disk is one line (exit 5), no MLflow traceback; a
real tmpfs (``small_disk``) filled to the last byte after the store is made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compat.embeddings.bundle import EmbeddingBundle, save_bundle


def _compat(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI",
                                                           "MLFLOW_LOGGING_LEVEL")}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "compat.cli.main", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.mark.slow  # ~13 s: a real 6 MB file system (the default run fills a real disk in tests/backfill/test_out_safety.py)
def test_a_promotion_on_a_full_registry_disk_is_one_line(tmp_path, small_disk):
    disk = small_disk("6m")
    root = tmp_path / "project"
    (root / "contracts").mkdir(parents=True)
    (root / "registry").symlink_to(disk)
    (root / "contracts" / "v1.yaml").write_text("version: v1\nembedding_dim: 4\nhead: cosface\n")
    bundle = EmbeddingBundle(np.eye(4, dtype=np.float32), np.arange(4), list("abcd"), version="v1")
    save_bundle(root / "v1.npz", bundle)
    r = _compat(root, "register", "v1", "--embeddings", "v1.npz")
    assert r.returncode == 0, r.stderr
    with open(disk / "filler", "wb") as f:  # every free byte taken
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    r = _compat(root, "promote", "v1")
    assert r.returncode == 5, r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: {disk}/mlflow.db: cannot write: no space left on the device")
    assert "Traceback" not in r.stderr + r.stdout
    (disk / "filler").unlink()  # room again: nothing was half-done, the promotion goes through
    r = _compat(root, "promote", "v1")
    assert r.returncode == 0, r.stderr
