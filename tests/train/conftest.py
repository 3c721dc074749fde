"""One torch thread: the test machine's 2 cores are shared, and oversubscribed OpenMP threads
spin-wait (a 2-thread run of a tiny model was 30x slower than a 1-thread one under load).

The suite imports test modules with ``--import-mode=importlib``, so this folder is put on
sys.path here for its helper modules (``train_synthetic``, ``loss_fakes``, ``ddp_worker``)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
