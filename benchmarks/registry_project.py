"""A throw-away compat project with versions registered from embeddings bundles.

Shared by the registry benchmarks (``bench_promote.py``, ``bench_cli.py``): an evaluation set of
``items`` items, contracts for ``v1`` (root) and ``v2`` (child of v1), and one bundle per
version, registered through the real CLI (the cached-embeddings path: no forward pass). v1 is
promoted, so ``production`` is set and the promotion log holds one move.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class BenchProject:
    """Where the project lies and what its evaluation set holds."""

    root: Path
    items: int
    dim: int
    queries: int
    gallery: int


def run(args: list[str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and exit code of ``compat <args>`` in a fresh process (imports included)."""
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "compat.cli.main", *args], cwd=cwd, capture_output=True, text=True
    )
    return time.perf_counter() - t, r.returncode


def build_project(
    root: Path, items: int = 10_000, dim: int = 128, per_class: int = 10
) -> BenchProject:
    """Write the evaluation set, contracts and bundles under ``root``, register v1 and v2 and
    promote v1. The registry is the embedded sqlite store under ``root/registry``."""
    from compat.embeddings.bundle import EmbeddingBundle, save_bundle

    if os.environ.get("MLFLOW_TRACKING_URI") is not None:
        raise SystemExit("unset MLFLOW_TRACKING_URI: the benchmark uses a throw-away sqlite store")
    n_cls = items // per_class
    labels = np.repeat(np.arange(n_cls), per_class)
    names = [f"c{c}/{i}" for c in range(n_cls) for i in range(per_class)]
    half = per_class // 2
    query = [i for i in range(len(names)) if i % per_class < half]
    gallery = [i for i in range(len(names)) if i % per_class >= half]
    rng = np.random.default_rng(0)
    pairs = sorted(
        {(int(a), int(a) + 1, True) for a in range(0, len(names), per_class)}
        | {(int(a), int(a) + per_class, False) for a in range(0, len(names) - per_class, per_class)}
    )
    (root / "splits").mkdir(parents=True)
    (root / "splits/eval.json").write_text(
        json.dumps(
            {
                "fingerprint": "b" * 16,
                "source_fingerprint": "b" * 16,
                "items": names,
                "labels": [f"c{c}" for c in labels],
                "query": query,
                "gallery": gallery,
                "nonmated_classes": [],
                "pairs": [list(p) for p in pairs],
            }
        )
    )
    centers = rng.normal(size=(n_cls, dim))
    (root / "contracts").mkdir()
    (root / "contracts/v1.yaml").write_text(f"version: v1\nembedding_dim: {dim}\nhead: cosface\n")
    (root / "contracts/v2.yaml").write_text(
        f"version: v2\nparent: v1\nembedding_dim: {dim}\nhead: cosface\ncriteria:\n"
        "  - {protocol: identification, metric: top1, require: cross > self_parent, confidence: 0.95}\n"
        "  - {protocol: identification, metric: mAP, require: cross > self_parent}\n"
        "  - {protocol: verification, metric: tar@far=0.01, require: cross > self_parent}\n"
    )
    for v, noise in (("v1", 3.0), ("v2", 2.0)):
        x = centers[labels] + noise * rng.normal(size=(len(names), dim))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        save_bundle(
            root / f"{v}.npz", EmbeddingBundle(embeddings=x, labels=labels, ids=names, version=v)
        )
    for v in ("v1", "v2"):
        if run(["register", v, "--embeddings", str(root / f"{v}.npz")], root)[1] != 0:
            raise SystemExit(f"compat register {v} failed in {root}")
    if run(["promote", "v1"], root)[1] != 0:
        raise SystemExit(f"compat promote v1 failed in {root}")
    return BenchProject(root, len(names), dim, len(query), len(gallery))
