"""Query adapters side by side (compat.maps): fit time, apply rows/s against a plain numpy
matmul of the same shape, and recovery against the number of fit pairs, on synthetic pairs.

Pairs: latent class structure z (``--classes`` classes, ``--dim`` dims); the old model sees
z + noise 1.5 (a weaker model), the new one (z + noise 0.5) under a random rotation (``--new-dim``
> ``--dim``: a random semi-orthogonal map into a wider space). Recovery = held-out top-1 of
adapter(new queries) against the old rows (class retrieval on held-out classes), beside the raw
rows (no-map) and the old model's self test M(old, old), which the adapter must beat to be kept.

    python benchmarks/bench_adapters.py [--pairs 1000 5000 20000] [--dim 128] [--new-dim 128]
        [--apply-rows 65536] [--rounds 3] [--mlp-epochs 20] [--mlp-hidden 256] [--threads 1]

Each apply path runs ``--rounds`` times interleaved; the best round counts (a shared host).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from timing import best_of


def pairs(n: int, d_old: int, d_new: int, classes: int, seed: int):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    z = rng.standard_normal((classes, d_old))[labels]
    old = z + 1.5 * rng.standard_normal((n, d_old))
    q, r = np.linalg.qr(rng.standard_normal((max(d_old, d_new), max(d_old, d_new))))
    q = (q * np.sign(np.diag(r)))[:d_new, :d_old]
    new = (z + 0.5 * rng.standard_normal((n, d_old))) @ q.T
    unit = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    return unit(new), unit(old), labels.tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, nargs="+", default=[1000, 5000, 20000])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--new-dim", type=int, default=128)
    ap.add_argument("--classes", type=int, default=200)
    ap.add_argument("--apply-rows", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mlp-epochs", type=int, default=20)
    ap.add_argument("--mlp-hidden", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from compat.maps import CheckConfig, fit_map

    kinds = {
        "procrustes": {},
        "affine": {},
        "affine-rank32": {"rank": 32},
        "residual-mlp": {"epochs": args.mlp_epochs, "hidden": args.mlp_hidden, "blocks": 1,
                         "residual": False, "loss": "cosine", "lr": 1e-2, "weight_decay": 0.0,
                         "device": "cpu", "patience": None},
    }  # fmt: skip
    print(f"threads {args.threads}; old {args.dim}-d, new {args.new_dim}-d, {args.classes} classes")
    print("\nrecovery (held-out top-1 on 20% held-out classes; adapter vs raw vs M(old, old))")
    print(f"{'pairs':>6} {'kind':<14} {'fit s':>7} {'adapter':>8} {'no-map':>7} {'old-self':>8} "
          f"{'lower':>7} verdict")  # fmt: skip
    fitted = {}
    for n in args.pairs:
        new, old, labels = pairs(n, args.dim, args.new_dim, args.classes, seed=n)
        for name, p in kinds.items():
            kind = name.split("-rank")[0]
            m = fit_map(kind, new, old, labels=labels, params=p, check=CheckConfig(resamples=500))
            h = m.card.heldout
            print(f"{n:>6} {name:<14} {m.card.fit_seconds:>7.2f} {h.mapped:>8.4f} "
                  f"{h.no_map:>7.4f} {h.old_self:>8.4f} {h.lower_bound:>+7.4f} "
                  f"{'kept' if m.refused is None else 'refused'}")  # fmt: skip
            fitted[name] = m

    rows = np.random.default_rng(0).standard_normal((args.apply_rows, args.new_dim))
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((args.new_dim, args.dim)).astype(np.float32)
    paths = {"numpy matmul": lambda: rows @ w}
    for name, m in fitted.items():
        paths[name] = lambda m=m: m.apply(rows)
    best = best_of(paths, args.rounds)
    base = args.apply_rows / best["numpy matmul"]
    print(f"\napply: {args.apply_rows} rows {args.new_dim} -> {args.dim}, best of {args.rounds}")
    for name, secs in best.items():
        rate = args.apply_rows / secs
        print(f"  {name:<14} {rate:>12,.0f} rows/s  ({rate / base:.2f}x numpy matmul)")


if __name__ == "__main__":
    main()
