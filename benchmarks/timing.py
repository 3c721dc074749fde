"""Side-by-side timing for the benchmarks: every path timed in turn within each round, so a
drift of the host's speed (frequent on shared 2-core machines) reaches every path alike, and the
best round of each kept (the least disturbed). Imported by the ``bench_*.py`` scripts, which run
from this folder (``python benchmarks/bench_blend.py``: the script's folder is on the path)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping


def best_of(paths: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Seconds of each path's fastest run over ``rounds`` rounds, the paths interleaved."""
    best = dict.fromkeys(paths, float("inf"))
    for _ in range(rounds):
        for name, fn in paths.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best
