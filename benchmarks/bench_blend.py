"""What a query blend costs per query beside the plain query adapter (issue 42 item 1).

A query adapter serves a query with one forward pass of the new model and the adapter's map; a
query blend (:mod:`compat.maps.blend`) embeds the query with the old model too (a second forward
pass) and interpolates the two on the sphere. This measures each piece and both paths end to
end, per query, as the MLflow model of a served version runs them
(:mod:`compat.registry.pyfunc_model`: BatchNorm folded, ``embed_images``), for single queries
(latency) and batches (throughput).

The models are the default pipeline's when their folders exist (``--new`` and ``--old`` under
``--models``; weights do not change the cost), else two untrained models of the default
architecture (small-cnn, 128-d, 32 px grey images). The map is a Procrustes map of the two
widths (its cost does not depend on its fit).

    python benchmarks/bench_blend.py [--models models] [--new v3-scratch] [--old v1]
        [--batches 1 32 256] [--queries 2048] [--rounds 5] [--threads 1] [--json out.json]

Each path runs ``--rounds`` times, interleaved; the best round counts (the least disturbed by
other work on a shared host). Prints one row per batch size; ``--json`` writes them too.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import numpy as np
import torch
from timing import best_of


def _models(folder: Path, new: str, old: str):
    """(new model, old model, where they came from), each folded for inference."""
    from compat.embeddings.embed import inference_model
    from compat.models.embedding import build_embedding_model
    from compat.models.version import load_version

    if (folder / new).is_dir() and (folder / old).is_dir():
        m_new, c_new = load_version(folder / new)
        m_old, _ = load_version(folder / old)
        size, channels = c_new.image_size, c_new.in_channels
        where = f"{folder / new} and {folder / old}"
    else:
        torch.manual_seed(0)
        m_new = build_embedding_model("small-cnn", 128, in_channels=1, image_size=32)
        m_old = build_embedding_model("small-cnn", 128, in_channels=1, image_size=32)
        size, channels, where = 32, 1, "two untrained small-cnn models (128-d, 32 px)"
    return inference_model(m_new.eval()), inference_model(m_old.eval()), size, channels, where


def _fitted_map(d_new: int, d_old: int):
    """A Procrustes query adapter and its blend (weight 0.5) between the two widths."""
    from compat.maps import CheckConfig, fit_map
    from compat.maps.config import BlendParams

    rng = np.random.default_rng(0)
    new = rng.standard_normal((512, d_new)).astype(np.float32)
    old = rng.standard_normal((512, d_old)).astype(np.float32)
    off = CheckConfig(refuse=False, resamples=1)
    adapter = fit_map("procrustes", new, old, check=off)
    blend = fit_map("procrustes", new, old, check=off, role="query-blend",
                    blend=BlendParams(weight=0.5))  # fmt: skip
    return adapter, blend


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=Path("models"))
    ap.add_argument("--new", default="v3-scratch")
    ap.add_argument("--old", default="v1")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    ap.add_argument("--queries", type=int, default=2048, help="queries per round and batch size")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from compat.embeddings.embed import embed_images
    from compat.maps.blend import slerp

    m_new, m_old, size, channels, where = _models(args.models, args.new, args.old)
    images = np.random.default_rng(1).integers(0, 256, (args.queries, size, size, channels),
                                               dtype=np.uint8)  # fmt: skip
    probe_new = embed_images(m_new, images[:2], fold=False)
    probe_old = embed_images(m_old, images[:2], fold=False)
    adapter, blend = _fitted_map(probe_new.shape[1], probe_old.shape[1])
    print(f"{platform.processor() or platform.machine()}, {args.threads} thread(s); {where}")
    print(f"{'batch':>5} {'new fwd':>9} {'old fwd':>9} {'adapter':>9} {'slerp':>9} "
          f"{'adapter path':>13} {'blend path':>11} {'blend/adapter':>14}  (us per query)")  # fmt: skip
    rows = []
    for batch in args.batches:
        chunks = [images[i : i + batch] for i in range(0, len(images), batch)]

        def forward(model, chunks=chunks):
            return [embed_images(model, c, batch_size=len(c), fold=False) for c in chunks]

        e_new, e_old = forward(m_new), forward(m_old)

        def adapted(e_new=e_new):
            return [adapter.apply(e) for e in e_new]

        a_new = adapted()

        def blended(a_new=a_new, e_old=e_old):  # the interpolation alone (Eq. 1)
            return [slerp(o, a, 0.5) for a, o in zip(a_new, e_old, strict=True)]

        def adapter_path(forward=forward):
            return [adapter.apply(e) for e in forward(m_new)]

        def blend_path(forward=forward):
            pairs = zip(forward(m_new), forward(m_old), strict=True)
            return [blend.queries(e, o) for e, o in pairs]

        paths = {
            "new fwd": lambda forward=forward: forward(m_new),
            "old fwd": lambda forward=forward: forward(m_old),
            "adapter": adapted,
            "slerp": blended,
            "adapter path": adapter_path,
            "blend path": blend_path,
        }
        best = best_of(paths, args.rounds)
        us = {k: v / len(images) * 1e6 for k, v in best.items()}
        ratio = us["blend path"] / us["adapter path"]
        print(f"{batch:>5} {us['new fwd']:>9.1f} {us['old fwd']:>9.1f} {us['adapter']:>9.2f} "
              f"{us['slerp']:>9.2f} {us['adapter path']:>13.1f} {us['blend path']:>11.1f} "
              f"{ratio:>13.2f}x")  # fmt: skip
        rows.append({"batch": batch, "us_per_query": us, "blend_over_adapter": ratio})
    if args.json is not None:
        args.json.write_text(json.dumps({"models": where, "threads": args.threads, "rows": rows},
                                        indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
