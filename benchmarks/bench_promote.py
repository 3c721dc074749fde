"""Wall time of ``compat promote`` when embeddings need no model run (target: <= 5 s).

    python benchmarks/bench_promote.py [--items 10000] [--dim 128] [--bootstrap 1000]

Builds a throw-away project with an evaluation set of ``--items`` items, registers v1 and v2
from embeddings bundles (the cached-embeddings path: no forward pass), then times the whole
``compat promote v2 --against v1`` command (a fresh process: imports included) next to
``compat --help`` and ``compat versions`` in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def run(args: list[str], cwd: Path) -> tuple[float, int]:
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "compat.cli.main", *args], cwd=cwd, capture_output=True, text=True
    )
    return time.perf_counter() - t, r.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--per-class", type=int, default=10)
    ap.add_argument("--bootstrap", type=int, default=1000)
    args = ap.parse_args()
    from compat.embeddings.bundle import EmbeddingBundle, save_bundle

    root = Path(tempfile.mkdtemp(prefix="bench-promote-"))
    n_cls = args.items // args.per_class
    labels = np.repeat(np.arange(n_cls), args.per_class)
    items = [f"c{c}/{i}" for c in range(n_cls) for i in range(args.per_class)]
    half = args.per_class // 2
    query = [i for i in range(len(items)) if i % args.per_class < half]
    gallery = [i for i in range(len(items)) if i % args.per_class >= half]
    rng = np.random.default_rng(0)
    pairs = sorted(
        {(int(a), int(a) + 1, True) for a in range(0, len(items), args.per_class)}
        | {
            (int(a), int(a) + args.per_class, False)
            for a in range(0, len(items) - args.per_class, args.per_class)
        }
    )
    (root / "splits").mkdir()
    (root / "splits/eval.json").write_text(
        json.dumps(
            {
                "fingerprint": "b" * 16,
                "source_fingerprint": "b" * 16,
                "items": items,
                "labels": [f"c{c}" for c in labels],
                "query": query,
                "gallery": gallery,
                "nonmated_classes": [],
                "pairs": [list(p) for p in pairs],
            }
        )
    )
    centers = rng.normal(size=(n_cls, args.dim))
    (root / "contracts").mkdir()
    (root / "contracts/v1.yaml").write_text(
        f"version: v1\nembedding_dim: {args.dim}\nhead: cosface\n"
    )
    (root / "contracts/v2.yaml").write_text(
        f"version: v2\nparent: v1\nembedding_dim: {args.dim}\nhead: cosface\ncriteria:\n"
        "  - {protocol: identification, metric: top1, require: cross > self_parent, confidence: 0.95}\n"
        "  - {protocol: identification, metric: mAP, require: cross > self_parent}\n"
        "  - {protocol: verification, metric: tar@far=0.01, require: cross > self_parent}\n"
    )
    for v, noise in (("v1", 3.0), ("v2", 2.0)):
        x = centers[labels] + noise * rng.normal(size=(len(items), args.dim))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        save_bundle(
            root / f"{v}.npz", EmbeddingBundle(embeddings=x, labels=labels, ids=items, version=v)
        )
    env_note = os.environ.get("MLFLOW_TRACKING_URI")
    assert env_note is None, (
        "unset MLFLOW_TRACKING_URI: the benchmark uses a throw-away sqlite store"
    )
    for v in ("v1", "v2"):
        assert run(["register", v, "--embeddings", str(root / f"{v}.npz")], root)[1] == 0
    assert run(["promote", "v1"], root)[1] == 0
    t_help, _ = run(["--help"], root)
    t_versions, _ = run(["versions"], root)
    t_promote, code = run(
        ["promote", "v2", "--against", "v1", "--dry-run", "--bootstrap", str(args.bootstrap)], root
    )
    print(
        f"items={args.items} dim={args.dim} queries={len(query)} gallery={len(gallery)} bootstrap={args.bootstrap}"
    )
    print(f"compat --help      {t_help:6.2f} s   (target <= 0.5 s)")
    print(f"compat versions    {t_versions:6.2f} s")
    print(f"compat promote     {t_promote:6.2f} s   exit {code}   (target <= 5 s)")
    print(f"ratio promote / 5 s target: {t_promote / 5:.2f}")


if __name__ == "__main__":
    main()
