"""A real SIGKILL of ``stages/train.py`` mid-run, then a restart: same final weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_synthetic import make_project

REPO = Path(__file__).resolve().parents[2]
CFG = {"backbone": "tiny", "dim": 8, "batch_size": 16, "epochs": 6, "seed": 2}


def _stage(root: Path, models: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        str(REPO / "stages" / "train.py"),
        "v1",
        "--models",
        models,
        "--no-progress",
    ]
    return subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_then_restart_gives_identical_weights(tmp_path):
    make_project(tmp_path, {"train": {"v1": CFG}}, num_classes=8, per_class=64, size=16)
    full = _stage(tmp_path, "models_full")
    assert full.wait(timeout=300) == 0, full.stderr.read().decode()[-2000:]

    index = tmp_path / "cache" / "checkpoints" / "v1" / "checkpoint.json"
    victim = _stage(tmp_path, "models_killed")
    deadline = time.time() + 300
    while not index.exists() and time.time() < deadline and victim.poll() is None:
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    epoch = json.loads(index.read_text())["epoch"]
    assert 1 <= epoch < CFG["epochs"]
    assert not (tmp_path / "models_killed" / "v1" / "card.json").exists()

    restarted = _stage(tmp_path, "models_killed")
    assert restarted.wait(timeout=300) == 0, restarted.stderr.read().decode()[-2000:]
    card = lambda d: json.loads((tmp_path / d / "v1" / "card.json").read_text())  # noqa: E731
    assert card("models_killed")["weights_sha256"] == card("models_full")["weights_sha256"]
