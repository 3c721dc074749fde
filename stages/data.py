"""DVC stage ``data``: materialise the image source named by params.yaml ``data``.

Writes ``data/source.json`` (items, labels, size, fingerprint) and, for the embedded default,
``data/glyphs.npy``. Usage: ``python stages/data.py``.
"""

from __future__ import annotations

import sys
import time

from compat.data.sources import build_source
from compat.errors import CompatError
from compat.params import load_params


def main() -> int:
    try:
        params = load_params()
        start = time.perf_counter()
        source = build_source(params.data, "data")
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code
    info = source.describe()
    print(
        f"data: {info['kind']} source, {info['items']} items in {info['classes']} classes, "
        f"{info['image_size']} px x {info['channels']} ch, fingerprint {info['fingerprint']} "
        f"({time.perf_counter() - start:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
