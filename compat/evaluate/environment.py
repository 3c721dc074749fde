"""The machine an evaluation ran on, recorded beside its numbers.

Training and embedding on the CPU are bit-for-bit reproducible on one machine but not across
processors (docs/findings.md, "Determinism"), so a metrics file names the processor, the torch
build, the kernels torch picked, the thread count and whether the CPU has native bf16 (where
compat trains in bf16); the README's generated numbers say which machine they come from.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any


def cpu_name() -> str | None:
    """The processor's model name (``/proc/cpuinfo`` on Linux, else the platform's word)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def machine_facts(device: str | None = None) -> dict[str, Any]:
    """``{cpu, arch, torch, numpy, threads, cpu_capability, native_bf16, device}`` of this
    process. ``native_bf16``: the CPU computes bf16 natively, so compat trains there under bf16
    autocast (:mod:`compat.cpu`; float32 elsewhere), which moves a training's numbers more than
    its last bits."""
    import numpy as np
    import torch

    from compat.cpu import cpu_has_fast_bf16

    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = None
    return {
        "cpu": cpu_name(),
        "arch": platform.machine() or None,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": capability,
        "native_bf16": cpu_has_fast_bf16(),
        "device": device,
    }


__all__ = ["cpu_name", "machine_facts"]
