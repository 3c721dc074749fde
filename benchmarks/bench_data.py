"""Render rate of the embedded glyph generator on one core (target: >= 1,000 images/s).

    python benchmarks/bench_data.py [--classes 200] [--per-class 20]

Prints images/s for one process and for all cores, side by side in one run.
"""

from __future__ import annotations

import argparse
import os
import time

from compat.data.embedded import render_dataset, select_codepoints
from compat.data.render import Distortion


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--classes", type=int, default=200)
    ap.add_argument("--per-class", type=int, default=20)
    ap.add_argument("--size", type=int, default=32)
    args = ap.parse_args()
    cps = select_codepoints(args.classes, 0, 30)
    n = len(cps) * args.per_class
    for workers in (1, os.cpu_count() or 1):
        t = time.perf_counter()
        render_dataset(cps, args.per_class, 0, args.size, 1, Distortion(), workers=workers)
        dt = time.perf_counter() - t
        print(
            f"workers={workers}: {n} images of {args.size} px in {dt:.2f} s = {n / dt:,.0f} images/s"
        )


if __name__ == "__main__":
    main()
