"""Where a fit runs and how deterministic it is: shared by the training loop and psi fitting."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from compat.errors import BadInputError


def resolve_device(pref: str, what: str = "device") -> torch.device:
    """``auto``: CUDA when present (this process's LOCAL_RANK device under torchrun), else CPU.

    ``what`` prefixes the error when ``cuda`` is asked for on a machine without it.
    """
    if pref == "cuda" or (pref == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise BadInputError(f"{what}: cuda requested but no CUDA device is available")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


@contextlib.contextmanager
def determinism(enabled: bool, device: torch.device) -> Iterator[None]:
    """Deterministic algorithms on the CPU for the duration of a run (restored afterwards)."""
    if not enabled or device.type != "cpu":
        yield
        return
    import torch.utils.deterministic as det

    before = torch.are_deterministic_algorithms_enabled()
    before_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    before_fill = det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    # Deterministic mode also fills every new allocation with NaN (a debugging aid that costs
    # memory bandwidth on every activation, a few percent of a CPU step); results do not need it.
    det.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=before_warn)
        det.fill_uninitialized_memory = before_fill
