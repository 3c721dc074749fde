"""``compat`` whose registry lookups that find nothing take SECONDS longer, for race tests.

``python slow_register.py SECONDS register ...``: every ``Registry.find`` that misses sleeps
before it returns, so registrations started together all read "not registered" before any of
them writes: the window in which two registrations of one name used to create two versions.
"""

from __future__ import annotations

import sys
import time

from compat.cli.main import app
from compat.registry.store import Registry


def main(seconds: float) -> None:
    real_find = Registry.find

    def find(self, version):
        rec = real_find(self, version)
        if rec is None:
            time.sleep(seconds)
        return rec

    Registry.find = find
    app(args=sys.argv[2:], prog_name="compat")


if __name__ == "__main__":
    main(float(sys.argv[1]))
