"""A real SIGKILL of ``compat backfill`` mid-run, then the same command again: it resumes from
the saved batches and writes exactly what an uninterrupted run writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from compat.backfill.output import lock_path_for
from compat.backfill.resume import work_dir_for
from compat.embeddings.bundle import Sidecar, save_sidecar
from compat.embeddings.reader import load_gallery
from compat.io import sha256_file
from compat.maps.psi import upgrade_array

# Runs the CLI with every saved batch slowed down, so the test can kill it mid-way (the product
# code has no such hook: the slowing is patched in from the test side).
SLOW_CLI = Path(__file__).with_name("slow_backfill.py")


def _cmd(root, out, *, slow=False, gallery="g.npz"):
    entry = [str(SLOW_CLI)] if slow else ["-m", "compat.cli.main"]
    return [
        sys.executable, *entry, "backfill",
        "--gallery", str(root / gallery), "--from", "v1", "--to", "v2",
        "--out", str(out), "--models", str(root / "models"),
        "--batch-size", "10", "--no-progress", "--json",
    ]  # fmt: skip


@pytest.mark.parametrize(("src", "dst"), [("g.npz", "g2.npz"), ("g.npy", "g2")])
def test_sigkill_then_rerun_resumes_and_matches(tmp_path, kit, src, dst):
    psi, _ = kit.make_psi(tmp_path / "models" / "v2" / "upgrade")
    gallery = kit.make_gallery(tmp_path / "g.npz", n=200)
    if src == "g.npy":  # a memory-mapped matrix in, Parquet shards out
        np.save(tmp_path / "g.npy", gallery.embeddings)
        save_sidecar(tmp_path / "g.meta.npz", Sidecar(gallery.labels, None, None, "v1", None, {}))
    digest = sha256_file(tmp_path / src)
    out = tmp_path / dst
    work = work_dir_for(out)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    victim = subprocess.Popen(
        _cmd(tmp_path, out, slow=True, gallery=src),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 120
    while time.time() < deadline and victim.poll() is None:
        if len(list(work.glob("batch-*.sha256"))) >= 3:  # a batch is finished with its sha256
            break
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL, victim.stderr.read().decode()[-2000:]
    saved = len(list(work.glob("batch-*.sha256")))
    assert 3 <= saved < 20
    assert not out.exists()  # the output appears only when complete
    assert not list(tmp_path.glob(f".{dst}.*.tmp"))
    assert lock_path_for(out).exists()  # a killed run cannot remove its lock file: the next does

    done = subprocess.run(
        _cmd(tmp_path, out, gallery=src), env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(done.stdout)
    assert result["resumed_batches"] == saved and result["upgraded"] == 200
    assert "resuming" in done.stderr.decode()
    got = load_gallery(out)
    np.testing.assert_allclose(got.embeddings, upgrade_array(psi, gallery.embeddings), atol=1e-6)
    assert got.row_versions == ["v2"] * 200
    assert not work.exists() and not lock_path_for(out).exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert sha256_file(tmp_path / src) == digest
