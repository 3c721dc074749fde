"""The experiment's scripts live in experiments/sequence/ (not a package): load them by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = REPO / "experiments" / "sequence"


def script(name: str) -> ModuleType:
    """Import ``experiments/sequence/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"sequence_{name}", EXPERIMENT / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the module's annotations through it
    spec.loader.exec_module(module)
    return module
