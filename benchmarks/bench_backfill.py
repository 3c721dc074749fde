"""Backfill cost per gallery item: upgrading stored embeddings with psi versus re-embedding the
images through the new backbone (issue 7 target: psi >= 50x faster per item on the CPU).

    python benchmarks/bench_backfill.py [--images 2048] [--rows 65536] [--hidden 256 512 1024 4096]

Both paths are the ones compat runs, measured side by side in one process, interleaved over
``--rounds`` rounds (best round per path, since the host may be shared):

* re-embed: :func:`compat.embeddings.embed.embed_images` of uint8 images through the new
  version's backbone (default: the pipeline's ``small-cnn`` at 32 px, 1 channel, dim 128);
  image decoding is *not* counted, which favours re-embedding;
* psi:      :func:`compat.maps.psi.upgrade_array` (BatchNorm folded, fixed row blocks) of
  stored dim-128 embeddings, for each ``--hidden`` width (256 is compat's CPU default; BiCT 4096;
  widths above 1024 are timed on ``--rows`` / 8 rows to keep the run short);
* backfill: the whole ``compat backfill`` path for the default width (read the bundle, upgrade in
  resumable batches, write the output bundle), so file I/O is included once.

Prints per-item microseconds and the per-item speed ratio re-embed / psi; ``--json`` writes them.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _best(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=2048, help="images re-embedded per round")
    ap.add_argument("--rows", type=int, default=65536, help="stored embeddings upgraded per round")
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 512, 1024, 4096])
    ap.add_argument("--default-hidden", type=int, default=256)
    ap.add_argument("--backbone", default="small-cnn")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from compat.backfill.apply import backfill
    from compat.embeddings.bundle import EmbeddingBundle, save_bundle
    from compat.embeddings.embed import embed_images
    from compat.maps.psi import UpgradeModule, save_upgrade, upgrade_array
    from compat.models.embedding import build_embedding_model

    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    model = build_embedding_model(
        args.backbone, args.dim, in_channels=args.channels, image_size=args.size
    ).eval()
    images = rng.integers(0, 256, (args.images, args.size, args.size, args.channels), np.uint8)
    stored = rng.standard_normal((args.rows, args.dim)).astype(np.float32)
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    psis = {h: UpgradeModule(args.dim, args.dim, h).eval() for h in args.hidden}
    if args.default_hidden not in psis:
        psis[args.default_hidden] = UpgradeModule(args.dim, args.dim, args.default_hidden).eval()

    # warm-up (allocators, BLAS threads, faiss/torch lazy init)
    embed_images(model, images[:256], 256)
    for psi in psis.values():
        upgrade_array(psi, stored[:8192])

    workdir = tempfile.TemporaryDirectory(prefix="bench-backfill-")
    tmp = Path(workdir.name)
    save_bundle(
        tmp / "g.npz",
        EmbeddingBundle(embeddings=stored, labels=np.zeros(args.rows, np.int64), version="v1"),
    )
    save_upgrade(tmp / "psi", psis[args.default_hidden], {"from": "v1", "to": "v2"})

    def run_file() -> None:
        backfill(
            tmp / "g.npz",
            tmp / "g2.npz",
            source="v1",
            target="v2",
            psi_dir=tmp / "psi",
            progress=False,
        )

    t_embed = float("inf")
    t_psi = {h: float("inf") for h in psis}
    n_rows = {h: args.rows if h <= 1024 else max(8192, args.rows // 8) for h in psis}
    t_file = float("inf")
    for _ in range(args.rounds):  # interleaved: every path sees the same host load
        t_embed = min(t_embed, _best(lambda: embed_images(model, images, 512), 1))
        for h, psi in psis.items():
            rows = stored[: n_rows[h]]
            t_psi[h] = min(t_psi[h], _best(lambda psi=psi, rows=rows: upgrade_array(psi, rows), 1))
        t_file = min(t_file, _best(run_file, 1))

    per_image = t_embed / args.images
    print(
        f"re-embed: {args.backbone} {args.size}px x{args.channels} -> {args.dim}: "
        f"{per_image * 1e6:9.1f} us/item ({args.images / t_embed:,.0f} images/s), "
        f"{torch.get_num_threads()} threads"
    )
    results: dict[str, object] = {
        "reembed_us_per_item": per_image * 1e6,
        "backbone": args.backbone,
        "threads": torch.get_num_threads(),
        "psi": {},
    }
    for h in sorted(t_psi):
        per_row = t_psi[h] / n_rows[h]
        ratio = per_image / per_row
        mark = "  (default)" if h == args.default_hidden else ""
        print(
            f"psi hidden {h:5d}: {per_row * 1e6:9.2f} us/item  ratio {ratio:7.1f}x "
            f"{'>= 50x' if ratio >= 50 else '<  50x'}{mark}"
        )
        results["psi"][h] = {"us_per_item": per_row * 1e6, "ratio": ratio}  # type: ignore[index]
    per_file_row = t_file / args.rows
    file_ratio = per_image / per_file_row
    print(
        f"compat backfill (hidden {args.default_hidden}, file in -> file out): "
        f"{per_file_row * 1e6:9.2f} us/item  ratio {file_ratio:7.1f}x"
    )
    results["backfill_file"] = {"us_per_item": per_file_row * 1e6, "ratio": file_ratio}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    workdir.cleanup()


if __name__ == "__main__":
    main()
