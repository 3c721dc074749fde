"""The cost of fixed row blocks: psi applied to stored rows in fixed blocks of ``--blocks`` rows
(:func:`compat.models.rowblocks.map_rows`, what compat runs so a row's result does not depend
on the batch size) against the same psi as one plain product per 8,192 rows (what compat ran
before, whose results depended on the batch), measured side by side in one process.

    python benchmarks/bench_rowblocks.py [--rows 65536] [--hidden 1024] [--blocks 64 128 256 512 1024]

Each path runs ``--rounds`` times interleaved; the best round counts (the host may be shared).
Prints rows/s of each and the ratio fixed-blocks / plain (target: >= 0.9 at compat's
``ROW_BLOCK``).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from timing import best_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--blocks", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from compat.maps.psi import FoldedUpgrade, UpgradeModule
    from compat.models.rowblocks import ROW_BLOCK, map_rows

    torch.manual_seed(0)
    psi = UpgradeModule(args.dim, args.dim, args.hidden, residual=True).eval()
    for p in psi.parameters():
        torch.nn.init.normal_(p, std=0.05)
    fast = FoldedUpgrade(psi)
    x = np.random.default_rng(0).standard_normal((args.rows, args.dim)).astype(np.float32)

    def plain() -> None:
        for s in range(0, len(x), 8192):
            fast(torch.from_numpy(x[s : s + 8192])).numpy()

    def fixed(block: int):
        return lambda: map_rows(fast._block, x, out_dim=args.dim, block=block)

    paths = {"plain (8,192 per product)": plain} | {
        f"fixed blocks of {b}": fixed(b) for b in args.blocks
    }
    best = best_of(paths, args.rounds)
    base = best["plain (8,192 per product)"]
    print(f"psi {args.dim} -> {args.hidden} x 3 -> {args.dim}, {args.rows:,} rows, "
          f"{torch.get_num_threads()} threads; compat's ROW_BLOCK = {ROW_BLOCK}")  # fmt: skip
    for name, t in best.items():
        print(f"{name:28s} {args.rows / t:12,.0f} rows/s   x{base / t:5.2f} of plain")


if __name__ == "__main__":
    main()
