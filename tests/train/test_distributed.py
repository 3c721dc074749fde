"""Two gloo processes under torchrun against one process with the same global batch.

Both runs see the same samples and the same random shifts in every global batch, and DDP
averages gradients, so they differ only through BatchNorm: each rank normalises with the
statistics of its half of the batch (SyncBatchNorm needs GPUs). Hence two checks, one launch
(``ddp_worker.py``): a model without BatchNorm must match to float rounding; the real entry point
(``stages/train.py``, BatchNorm model) must train, write one version, and land closer to the
single-process result than either moved from their common initialisation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from train_synthetic import make_project

from compat.models import load_version
from compat.models.embedding import build_embedding_model
from compat.train.run import derive_seed

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CFG = {"backbone": "tiny", "dim": 8, "batch_size": 16, "epochs": 2, "lr": 3e-3, "seed": 5}


def _flat(folder: Path) -> torch.Tensor:
    model, _ = load_version(folder)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.slow  # ~8 s: two real gloo processes
@pytest.mark.timeout(300)
def test_two_gloo_processes_match_one(tmp_path, monkeypatch):
    make_project(tmp_path, {"train": {"v1": CFG}}, per_class=16)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{REPO}{os.pathsep}{HERE}"}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(HERE / "ddp_worker.py"), "models_ddp",
    ]  # fmt: skip
    # Own process group: on a timeout the workers die with torchrun instead of lingering.
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        _, stderr = proc.communicate(timeout=280)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, stderr[-3000:]
    monkeypatch.chdir(tmp_path)
    import ddp_worker

    assert ddp_worker.main("models_single") == 0

    # 1. no BatchNorm: equal up to float rounding
    ddp_nobn = load_file(str(tmp_path / "models_ddp" / "nobn.safetensors"))
    single_nobn = load_file(str(tmp_path / "models_single" / "nobn.safetensors"))
    for k, v in single_nobn.items():
        assert torch.allclose(ddp_nobn[k], v, atol=1e-5, rtol=1e-4), k

    # 2. the entry point, with BatchNorm: one version written, close to the single-process one
    ddp_card = json.loads((tmp_path / "models_ddp" / "v1" / "card.json").read_text())
    single_card = json.loads((tmp_path / "models_single" / "v1" / "card.json").read_text())
    assert ddp_card["world_size"] == 2 and single_card["world_size"] == 1
    assert ddp_card["steps"] == single_card["steps"] == 8
    ddp, single = _flat(tmp_path / "models_ddp" / "v1"), _flat(tmp_path / "models_single" / "v1")
    torch.manual_seed(derive_seed(CFG["seed"], "v1"))
    init_model = build_embedding_model("tiny", 8, in_channels=1, image_size=8)
    init = torch.cat([p.detach().flatten() for p in init_model.parameters()])
    moved = (single - init).norm()
    assert moved > 0.1
    assert (ddp - single).norm() < 0.6 * moved
    assert (ddp - init).norm() > 0.5 * moved  # the processes trained, not just returned init
