import pytest
import torch

from compat.errors import BadInputError
from compat.train.device import determinism, resolve_device


def test_resolve_device_cpu_and_missing_cuda(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(BadInputError, match=r"^upgrade: device: cuda requested"):
        resolve_device("cuda", "upgrade: device")


def test_determinism_is_restored():
    before = torch.are_deterministic_algorithms_enabled()
    with determinism(True, torch.device("cpu")):
        assert torch.are_deterministic_algorithms_enabled()
    assert torch.are_deterministic_algorithms_enabled() == before
    with determinism(False, torch.device("cpu")):
        assert torch.are_deterministic_algorithms_enabled() == before
