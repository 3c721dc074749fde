"""The seeds' first results (BCT Table 1 in miniature), on the embedded data, on the CPU.

An old version trains on 50% of the training classes (``splits/v2.json`` in the default chain),
then two new versions on 100% (``splits/v3.json``): ``independent`` (no compatibility) and ``bct``
(influence loss against the old classifier, new classes synthesized). Every version gets its
own seed. Top-1 identification on the held-out evaluation classes (``splits/eval.json``, mated
queries only) is computed with an inline brute-force search:

    old/old | independent/old | independent/independent | bct/old | bct/bct

Expected (docs/reference.md): independent/old near chance and below old/old; bct/old above old/old;
bct/bct within a few points of independent/independent.

Needs the data and split stages first: ``python stages/data.py && python stages/split.py``.
Usage: ``python benchmarks/first_results.py [--epochs 6] [--threads 2] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def top1(
    queries: torch.Tensor, q_labels: np.ndarray, gallery: torch.Tensor, g_labels: np.ndarray
) -> float:
    """Fraction of queries whose most similar gallery item (cosine) has their label.

    Queries whose label has no gallery item (open-set non-mated probes) are skipped.
    """
    mated = np.isin(q_labels, g_labels)
    q = queries[torch.from_numpy(mated)]
    best = torch.cat([(chunk @ gallery.T).argmax(dim=1) for chunk in q.split(1024)])
    return float(np.mean(g_labels[best.numpy()] == q_labels[mated]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--old", default="v2", help="train manifest of the old version (50%% of classes)"
    )
    p.add_argument("--new", default="v3", help="train manifest of the new versions (100%%)")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--backbone", default="small-cnn")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="models folder (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from compat.data.sources import open_source
    from compat.data.split import load_eval_manifest, load_train_manifest
    from compat.models import embed_images, load_version
    from compat.train import TrainConfig, train_version

    source = open_source("data/source.json")
    old_m = load_train_manifest(f"splits/{args.old}.json")
    new_m = load_train_manifest(f"splits/{args.new}.json")
    ev = load_eval_manifest("splits/eval.json")
    models = args.out or Path(tempfile.mkdtemp(prefix="first-results-"))
    print(
        f"old: {len(old_m.classes)} classes / {len(old_m.items)} images; new: {len(new_m.classes)} "
        f"classes / {len(new_m.items)} images; eval: {len(set(ev.labels))} unseen classes, "
        f"{len(ev.query)} queries, {len(ev.gallery)} gallery; {torch.get_num_threads()} threads",
        flush=True,
    )
    base = dict(backbone=args.backbone, epochs=args.epochs)
    runs = [
        ("old", old_m, TrainConfig(**base)),
        ("independent", new_m, TrainConfig(**base, parent="old")),
        ("bct", new_m, TrainConfig(**base, method="bct", parent="old")),
    ]
    seconds = {}
    start = time.perf_counter()
    for name, manifest, cfg in runs:
        t0 = time.perf_counter()
        train_version(name, cfg, source=source, manifest=manifest, models_dir=models,
                      checkpoint_dir=models / ".ckpt" / name, progress=False)  # fmt: skip
        seconds[name] = time.perf_counter() - t0

    images = torch.from_numpy(source.load(ev.items))
    labels = np.asarray(ev.labels)
    q_idx, g_idx = np.asarray(ev.query), np.asarray(ev.gallery)
    emb = {}
    for name, _, _ in runs:
        model, _ = load_version(models / name)
        emb[name] = embed_images(model, images, batch_size=1024)
    pairs = [
        ("old", "old"),
        ("independent", "old"),
        ("independent", "independent"),
        ("bct", "old"),
        ("bct", "bct"),
    ]
    results = {}
    for q, g in pairs:
        results[f"{q}/{g}"] = 100 * top1(emb[q][q_idx], labels[q_idx], emb[g][g_idx], labels[g_idx])
    chance = 100 / len(set(labels[g_idx]))
    total = time.perf_counter() - start

    print("\n| " + " | ".join(results) + " |")
    print("|" + "---|" * len(results))
    print("| " + " | ".join(f"{v:.1f}" for v in results.values()) + " |")
    print(f"\ntop-1 %, chance {chance:.2f}%; training s: "
          + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()) + f"; total {total:.0f} s")  # fmt: skip
    r = results
    checks = {
        "independent/old near chance (< 5x chance)": r["independent/old"] < 5 * chance,
        "independent/old < old/old": r["independent/old"] < r["old/old"],
        "bct/old > old/old": r["bct/old"] > r["old/old"],
        "bct/bct within 5 points of independent/independent": abs(r["bct/bct"] - r["independent/independent"]) <= 5,
    }  # fmt: skip
    for text, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {text}")
    if args.json:
        args.json.write_text(json.dumps({"top1": results, "chance": chance, "seconds": seconds,
                                         "total_seconds": total, "checks": checks}, indent=2))  # fmt: skip
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
