"""``compat`` that SIGKILLs itself at one step of a promotion, for tests of what a kill leaves.

``python kill_promote.py STEP promote ...``; STEP is where the kill falls:

* ``torn``: halfway through writing the log's ``pending`` line;
* ``after-pending``: the ``pending`` record is written, the alias not yet moved;
* ``after-move``: the alias moved, the ``committed`` record not yet written;
* ``after-commit``: the ``committed`` record written, the ``compat.status`` tag not yet set.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from compat.cli.main import app
from compat.registry.promotions import PromotionLog
from compat.registry.store import Registry


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(step: str) -> None:
    real_append, real_move, real_tags = (
        PromotionLog.append, Registry.set_production, Registry.set_tags
    )  # fmt: skip

    def append(self, entry):
        if step == "torn" and entry.get("state") == "pending":
            line = json.dumps(entry, sort_keys=True).encode()
            with open(self.path, "ab") as f:
                f.write(line[: len(line) // 2])
            _die()
        if step == "after-move" and entry.get("state") == "committed":
            _die()
        real_append(self, entry)

    def set_production(self, rec):
        if step == "after-pending":
            _die()
        real_move(self, rec)

    def set_tags(self, rec, tags):
        if step == "after-commit" and tags.get("compat.status") == "promoted":
            _die()
        real_tags(self, rec, tags)

    PromotionLog.append, Registry.set_production, Registry.set_tags = (
        append, set_production, set_tags
    )  # fmt: skip
    app(args=sys.argv[2:], prog_name="compat")


if __name__ == "__main__":
    main(sys.argv[1])
