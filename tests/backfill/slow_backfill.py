"""``compat`` with a pause after each saved backfill batch: a test can then SIGKILL it mid-run.

The pause is patched in here, from the test side, around the atomic write of each batch file.
With ``SLOW_BACKFILL_HOLD`` naming a file, the run also waits after its second batch until that
file exists (at most 120 s): a test can act while the run surely still holds its output, however
loaded the machine is.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import compat.backfill.resume as resume_module
from compat.cli.main import app

_atomic_path = resume_module.atomic_path
_write_text = resume_module.write_text
_saved = [0]


@contextlib.contextmanager
def _slow_atomic_path(path: str | Path, size: int | None = None) -> Iterator[Path]:
    with _atomic_path(path, size) as tmp:
        yield tmp
    if Path(path).name.startswith("batch-"):
        time.sleep(0.25)


def _hold_after_checksum(path: str | Path, text: str) -> None:
    """A batch is done once its checksum is written (``write_text``): after the second, wait
    for the test's release file when ``SLOW_BACKFILL_HOLD`` names one."""
    _write_text(path, text)
    if Path(path).name.endswith(".sha256"):
        _saved[0] += 1
        hold = os.environ.get("SLOW_BACKFILL_HOLD")
        if hold and _saved[0] == 2:
            deadline = time.monotonic() + 120
            while not Path(hold).exists() and time.monotonic() < deadline:
                time.sleep(0.02)


resume_module.atomic_path = _slow_atomic_path
resume_module.write_text = _hold_after_checksum

if __name__ == "__main__":
    app(prog_name="compat")
