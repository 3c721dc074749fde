"""Training cost, measured side by side in one run (the host's speed drifts; ratios do not).

1. Epoch time of every method relative to ``independent`` (targets: bct <= 1.05x; l2, bct-kd,
   contrastive, hoc <= 1.35x). Methods run interleaved, round after round, and each method's
   median epoch time is compared, so a slow minute on a shared host hits every method alike.
2. compat's fit loop against a plain hand-written PyTorch loop on the same model, head, optimizer,
   batches and augmentation (target: compat >= 0.95x the plain loop's images/s).
3. ``--gpu``: a short resnet18 run at 112 px in bf16 on CUDA, reporting images/s.

Data are synthetic uint8 images (speed does not depend on content); parents are untrained
versions of the same architecture (their cost, not their quality, is measured).

Usage: ``python benchmarks/bench_train.py [--threads 1] [--rounds 3] [--images 4096]``
       ``python benchmarks/bench_train.py --gpu``
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

TARGETS = {"bct": 1.05, "l2": 1.35, "bct-kd": 1.35, "contrastive": 1.35, "hoc": 1.35}
METHODS = ["independent", "bct", "l2", "bct-kd", "contrastive", "hoc", "lwf", "unibct", "bict"]


def synthetic(n: int, classes: int, size: int, channels: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, size, size, channels), dtype=torch.uint8, generator=g)
    labels = [f"c{i % classes:04d}" for i in range(n)]
    return images, labels


def make_parent(root: Path, name: str, head: str, backbone: str, dim: int, classes: list[str],
                size: int, channels: int) -> Path:  # fmt: skip
    from compat.models import build_embedding_model, create_head, save_version

    torch.manual_seed(123)
    model = build_embedding_model(backbone, dim, in_channels=channels, image_size=size)
    h = create_head(head, dim, len(classes), s=16.0, m=0.2)
    fields = {
        "version": name, "backbone": backbone, "pooling": "avg", "dim": dim, "in_channels": channels,
        "image_size": size, "head": head, "head_params": h.params(), "num_classes": len(classes),
        "classes": classes,
    }  # fmt: skip
    save_version(root / name, model.eval(), h, fields)
    return root / name


def run_method(method, args, images, labels, models: Path) -> tuple[float, float]:
    """One epoch of ``method`` through the real fit loop: (wall seconds, CPU seconds)."""
    from compat.losses import create_loss
    from compat.models import FrozenParent, build_embedding_model, create_head
    from compat.train import TrainConfig
    from compat.train.fit import fit

    head_name = "dsimplex" if method == "hoc" else "cosface"
    parent_name = "p-dsimplex" if method == "hoc" else "p-cosface"
    classes = sorted(set(labels))
    targets = torch.tensor([classes.index(c) for c in labels])
    cfg = TrainConfig(
        backbone=args.backbone, dim=args.dim, head=head_name, method=method, epochs=1,
        batch_size=args.batch, checkpoint=False, device=args.device,
    )  # fmt: skip
    parent = None
    if method != "independent":
        parent = FrozenParent.load(models / parent_name, device=_device(args), amp=cfg.amp)
    torch.manual_seed(0)
    model = build_embedding_model(
        args.backbone, args.dim, in_channels=images.shape[3], image_size=images.shape[1]
    )
    if method == "lwf":
        model.load_state_dict(parent.model.state_dict())
    head = create_head(head_name, args.dim, len(classes), **cfg.head_params())
    loss = create_loss(method)
    result = fit(
        model, head, loss, images, targets, cfg, classes=classes, parent=parent, quiet=True
    )
    row = result.metrics[-1]
    return row["seconds"], row["cpu_seconds"]


def _device(args) -> torch.device:
    from compat.train.device import resolve_device

    return resolve_device(args.device)


def plain_loop(args, images, labels) -> tuple[float, float]:
    """The loop a PyTorch user writes by hand: same model, head, AdamW, cosine warm-up, batches."""
    from compat.models import build_embedding_model, create_head
    from compat.train.augment import shift_images

    device = _device(args)
    classes = sorted(set(labels))
    targets = torch.tensor([classes.index(c) for c in labels], device=device)
    torch.manual_seed(0)
    model = build_embedding_model(
        args.backbone, args.dim, in_channels=images.shape[3], image_size=images.shape[1]
    ).to(device, memory_format=torch.channels_last)  # the layout compat's loop uses
    head = create_head("cosface", args.dim, len(classes), s=16.0, m=0.2).to(device)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.05)
    steps = len(images) // args.batch
    warm = int(0.15 * steps)

    def factor(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (s - warm) / max(steps - warm - 1, 1)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    g = torch.Generator().manual_seed(0)
    data = images.to(device) if device.type == "cuda" else images
    model.train()
    t0, cpu0 = time.perf_counter(), time.process_time()
    perm = torch.randperm(len(images), generator=g)
    for i in range(steps):
        idx = perm[i * args.batch : (i + 1) * args.batch]
        shifts = torch.randint(-2, 3, (len(idx), 2), generator=g)
        u8 = shift_images(data[idx.to(data.device)], shifts, "edge")
        x = u8.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            emb = model(x)
        loss = head.loss(emb.float(), targets[idx.to(device)])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, time.process_time() - cpu0


def bench_cpu(args) -> dict:
    images, labels = synthetic(args.images, args.classes, args.size, 1)
    classes = sorted(set(labels))
    tmp = Path(tempfile.mkdtemp(prefix="bench-train-"))
    half = classes[: len(classes) // 2]
    make_parent(tmp, "p-cosface", "cosface", args.backbone, args.dim, half, args.size, 1)
    make_parent(tmp, "p-dsimplex", "dsimplex", args.backbone, args.dim, half, args.size, 1)
    methods = [m for m in METHODS if m in args.methods and m != "independent"]
    run_method("independent", args, images, labels, tmp)  # warm-up: allocator, oneDNN kernels
    ratios: dict[str, list[float]] = {m: [] for m in [*methods, "loop"]}
    cpu: dict[str, list[float]] = {m: [] for m in ["independent", *methods, "compat", "plain"]}
    paired: dict[str, list[tuple[float, float]]] = {m: [] for m in [*methods, "loop"]}
    for r in range(args.rounds):
        for m in [*methods, "loop"]:
            if m == "loop":
                pair = [("compat", lambda: run_method("independent", args, images, labels, tmp)),
                        ("plain", lambda: plain_loop(args, images, labels))]  # fmt: skip
            else:
                pair = [("independent", lambda: run_method("independent", args, images, labels, tmp)),
                        (m, lambda m=m: run_method(m, args, images, labels, tmp))]  # fmt: skip
            if r % 2:
                pair.reverse()  # ABBA: a drifting host slows the first and second alike
            got = {}
            for name, fn in pair:
                got[name] = fn()[1]
                cpu[name].append(got[name])
            if m == "loop":
                ratios[m].append(got["plain"] / got["compat"])  # compat throughput / plain
                paired[m].append((got["compat"], got["plain"]))
            else:
                ratios[m].append(got[m] / got["independent"])
                paired[m].append((got["independent"], got[m]))
        done = ", ".join(f"{m} {v[-1]:.2f}" for m, v in ratios.items())
        print(f"round {r + 1}/{args.rounds} ratios: {done}", file=sys.stderr, flush=True)
    med = {m: statistics.median(v) for m, v in ratios.items()}
    # Noise on a shared host only ever adds time, so the fastest run of each side is the second
    # estimate: min(method) / min(its paired independent runs).
    best = {m: min(b for _, b in v) / min(a for a, _ in v) for m, v in paired.items()}
    # (for "loop" the pairs are (compat, plain): min(plain) / min(compat) = compat's throughput ratio)
    print(
        f"\n{args.backbone} {args.size}px, {args.images} images, batch {args.batch}, "
        f"{torch.get_num_threads()} thread(s). Each ratio is the median over {args.rounds} rounds of "
        "back-to-back pairs (ABBA order) of CPU (process) time, so load from other processes on "
        "a shared host counts against neither side."
    )
    print(f"{'method':<14}{'CPU s':>8}{'vs indep':>10}{'min/min':>9}{'target':>9}  verdict")
    report: dict = {"config": {k: v for k, v in vars(args).items() if k != "json"}, "methods": {}}
    print(
        f"{'independent':<14}{statistics.median(cpu['independent']):>8.2f}{1.0:>9.2f}x{1.0:>8.2f}x"
    )
    for m in methods:
        target = TARGETS.get(m)
        verdict = "" if target is None else ("ok" if med[m] <= target else "OVER")
        tgt = "" if target is None else f"{target:.2f}x"
        print(
            f"{m:<14}{statistics.median(cpu[m]):>8.2f}{med[m]:>9.2f}x{best[m]:>8.2f}x{tgt:>9}  {verdict}"
        )
        report["methods"][m] = {
            "ratio": med[m], "ratio_of_minima": best[m], "ratios": ratios[m], "target": target,
            "cpu_pairs": paired[m],
        }  # fmt: skip
    print(
        f"\ncompat loop {statistics.median(cpu['compat']):.2f} CPU s, plain loop "
        f"{statistics.median(cpu['plain']):.2f} CPU s: compat throughput = {med['loop']:.3f}x plain "
        f"(min/min {best['loop']:.3f}x; target >= 0.95) {'ok' if med['loop'] >= 0.95 else 'UNDER'}"
    )
    report["loop"] = {
        "ratio": med["loop"], "ratio_of_minima": best["loop"], "ratios": ratios["loop"],
        "cpu_pairs": paired["loop"],
    }  # fmt: skip
    return report


def bench_gpu(args) -> dict:
    """resnet18 at 112 px, bf16 autocast, channels-last: images/s of the real fit loop."""
    from compat.losses import create_loss
    from compat.models import build_embedding_model, create_head
    from compat.train import TrainConfig
    from compat.train.fit import fit

    if not torch.cuda.is_available():
        print("no CUDA device: the GPU benchmark needs one", file=sys.stderr)
        return {}
    torch.backends.cudnn.benchmark = True
    n, size = args.gpu_images, 112
    images, labels = synthetic(n, 1000, size, 3)
    classes = sorted(set(labels))
    targets = torch.tensor([classes.index(c) for c in labels])
    cfg = TrainConfig(backbone="resnet18", dim=512, epochs=args.gpu_epochs, batch_size=256,
                      checkpoint=False, device="cuda")  # fmt: skip
    torch.manual_seed(0)
    model = build_embedding_model("resnet18", 512, in_channels=3, image_size=size)
    head = create_head("cosface", 512, len(classes), s=16.0, m=0.2)
    result = fit(model, head, create_loss("independent"), images, targets, cfg, classes=classes,
                 quiet=False, progress=False)  # fmt: skip
    ips = [r["images_per_s"] for r in result.metrics]
    print(f"resnet18 112px bf16 batch 256 on {torch.cuda.get_device_name()}: "
          f"images/s per epoch {[round(v) for v in ips]} (first includes cudnn autotune)")  # fmt: skip
    return {"gpu": torch.cuda.get_device_name(), "images_per_s": ips}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--threads", type=int, default=1, help="CPU threads (1: stable on a shared host)"
    )
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--classes", type=int, default=100, help="<= dim + 1 (hoc uses dsimplex)")
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--backbone", default="small-cnn")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    p.add_argument("--methods", nargs="*", default=METHODS)
    p.add_argument("--gpu", action="store_true", help="the resnet18 112 px bf16 run instead")
    p.add_argument("--gpu-images", type=int, default=25600)
    p.add_argument("--gpu-epochs", type=int, default=3)
    p.add_argument("--json", type=Path, help="also write the numbers here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    report = bench_gpu(args) if args.gpu else bench_cpu(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
