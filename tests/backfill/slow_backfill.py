"""``compat`` with a pause after each saved backfill batch: a test can then SIGKILL it mid-run.

The pause is patched in here, from the test side, around the atomic write of each batch file.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import compat.backfill.apply as apply_module
from compat.cli.main import app

_atomic_path = apply_module.atomic_path


@contextlib.contextmanager
def _slow_atomic_path(path: str | Path, size: int | None = None) -> Iterator[Path]:
    with _atomic_path(path, size) as tmp:
        yield tmp
    if Path(path).name.startswith("batch-"):
        time.sleep(0.25)


apply_module.atomic_path = _slow_atomic_path

if __name__ == "__main__":
    app(prog_name="compat")
