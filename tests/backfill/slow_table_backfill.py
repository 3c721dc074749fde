"""``compat`` that stops in the middle of a table backfill so a test can SIGKILL it there.

The stops are patched in here, from the test side. With ``SLOW_TABLE_STOP`` naming a file, the
run stops after the record of its third finished fragment: it writes that file and waits (at
most 120 s) to be killed, so the test acts while the run surely holds the table, however loaded
the machine is. With ``SLOW_TABLE_HOLD`` naming a file, the run stops right after its commit
(before it removes its work folder) the same way.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import compat.backfill.table as table_module
from compat.cli.main import app

_write_json = table_module.write_json
_commit_column = table_module.commit_column
_recorded = [0]


def _stop(env: str, text: str) -> None:
    marker = os.environ.get(env)
    if marker:
        Path(marker).write_text(text)
        time.sleep(120)


def _stop_after_third(path: Any, obj: Any, *args: Any, **kwargs: Any) -> None:
    _write_json(path, obj, *args, **kwargs)
    if Path(path).name.startswith("fragment-"):
        _recorded[0] += 1
        if _recorded[0] == 3:
            _stop("SLOW_TABLE_STOP", str(_recorded[0]))


def _hold_after_commit(*args: Any, **kwargs: Any) -> int:
    version = _commit_column(*args, **kwargs)
    _stop("SLOW_TABLE_HOLD", str(version))
    return version


table_module.write_json = _stop_after_third
table_module.commit_column = _hold_after_commit

if __name__ == "__main__":
    app(prog_name="compat")
