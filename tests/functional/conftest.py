"""One torch thread: the test machine's 2 cores are shared, and oversubscribed OpenMP threads
spin-wait (see tests/losses/conftest.py)."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
