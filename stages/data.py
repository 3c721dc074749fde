"""DVC stage ``data``: materialise the image source named by params.yaml ``data``.

Writes ``data/source.json`` (items, labels, size, fingerprint) and, for the embedded default,
``data/glyphs.npy``. Usage: ``python stages/data.py [--params params.yaml]``.
"""

from __future__ import annotations

import argparse
import sys
import time

from compat.params import PARAMS_FILE, PARAMS_SECTIONS, read_section
from compat.stage import run_stage


def main(argv: list[str] | None = None) -> int:
    """Run the stage; ``argv`` None (an in-process caller) means no arguments: the defaults."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=PARAMS_FILE)
    args = parser.parse_args([] if argv is None else argv)

    def body() -> int:
        from compat.data.config import DataParams, EmbeddedData
        from compat.data.sources import build_source

        # No data section: the embedded default. An unknown section is an error, so a typo
        # such as `dta:` cannot silently fall back to it.
        config = read_section(
            args.params, "data", DataParams, default=EmbeddedData(), sections=PARAMS_SECTIONS
        )
        start = time.perf_counter()
        source = build_source(config, "data")
        info = source.describe()
        print(
            f"data: {info['kind']} source, {info['items']} items in {info['classes']} classes, "
            f"{info['image_size']} px x {info['channels']} ch, fingerprint {info['fingerprint']} "
            f"({time.perf_counter() - start:.1f} s)"
        )
        return 0

    return run_stage(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
