"""Training beside other work: images/s alone and with another CPU-bound process, side by side.

The same training (small-cnn, 32 px, compat's fit loop with its defaults, one epoch of
synthetic images) in a fresh process, in three arms:

- ``compat``: the process imports compat first, so compat's defaults apply (compat/cpu.py:
  threads from the cores the process may use; OpenMP's passive wait where the CPU trains in
  float32);
- ``knob``: the same with ``COMPAT_THREADS=1``, what the docs tell a team running two jobs at
  once on 2 cores (``dvc queue start -j 2``, tests beside a training);
- ``torch``: the process imports torch first, so OpenMP starts with torch's own defaults;

each alone, beside a busy pure-Python loop (one core's worth of other work), and beside a second
copy of the same arm's training. Rounds interleave the arms so a drifting host slows all alike.
Ratios are images/s beside the other work over the ``compat`` arm's images/s alone (what the
machine gives a training with nothing else running). The target (issue 40): with one other
CPU-bound process on the machine, training keeps at least 0.4x its speed alone.

Usage: ``python benchmarks/bench_threads.py [--rounds 3] [--images 3072]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.4
BUSY = "while True: pass"


def child(args: argparse.Namespace) -> None:
    """One measurement (or, with --loop, train until killed): prints images/s as JSON."""
    import importlib

    # The order is the point: torch first starts OpenMP before compat can set its defaults.
    for name in ("torch", "compat") if args.torch_first else ("compat", "torch"):
        importlib.import_module(name)
    import torch

    from compat.losses import create_loss
    from compat.models import build_embedding_model, create_head
    from compat.train import TrainConfig
    from compat.train.fit import fit

    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.images, 32, 32, 1), dtype=torch.uint8, generator=g)
    targets = torch.arange(args.images) % 250
    classes = [f"c{i}" for i in range(250)]

    def one() -> float:
        cfg = TrainConfig(epochs=1, checkpoint=False)
        torch.manual_seed(0)
        model = build_embedding_model("small-cnn", 128, in_channels=1, image_size=32)
        head = create_head("cosface", 128, 250, **cfg.head_params())
        loss = create_loss("independent")
        r = fit(model, head, loss, images, targets, cfg, classes=classes, quiet=True)
        return float(r.metrics[-1]["images_per_s"])

    one()  # warm-up: allocator, oneDNN kernels
    while args.loop:
        one()
    print(json.dumps({"images_per_s": one(), "threads": torch.get_num_threads()}))


ARMS = ("compat", "knob", "torch")


def _env(arm: str = "compat") -> dict[str, str]:
    """The caller's environment without any OpenMP or compat thread setting (``knob``: with
    ``COMPAT_THREADS=1``)."""
    drop = ("OMP_", "GOMP_", "KMP_", "MKL_NUM_THREADS", "COMPAT_THREADS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if arm == "knob":
        env["COMPAT_THREADS"] = "1"
    return env


def _cmd(args: argparse.Namespace, arm: str, loop: bool = False) -> list[str]:
    cmd = [sys.executable, __file__, "--child", "--images", str(args.images)]
    return cmd + (["--torch-first"] if arm == "torch" else []) + (["--loop"] if loop else [])


def measure(args: argparse.Namespace, arm: str, beside: str) -> tuple[float, int]:
    other = None
    if beside == "busy":
        other = subprocess.Popen([sys.executable, "-c", BUSY], env=_env())
    elif beside == "training":
        other = subprocess.Popen(_cmd(args, arm, loop=True), env=_env(arm))
        time.sleep(args.settle)  # the other training past its imports and warm-up
    try:
        out = subprocess.run(_cmd(args, arm), env=_env(arm), capture_output=True, text=True)
    finally:
        if other is not None:
            other.kill()
            other.wait()
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    row = json.loads(out.stdout.strip().splitlines()[-1])
    return row["images_per_s"], row["threads"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=3072)
    parser.add_argument("--settle", type=float, default=8.0, help="seconds for the other training")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--torch-first", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    besides = ("alone", "busy", "training")
    runs: dict[tuple[str, str], list[float]] = {(a, b): [] for a in ARMS for b in besides}
    threads = {}
    for r in range(args.rounds):
        for beside in besides:
            for arm in ARMS[r % len(ARMS) :] + ARMS[: r % len(ARMS)]:
                ips, threads[arm] = measure(args, arm, beside)
                runs[arm, beside].append(ips)
                print(f"round {r + 1}: {arm:>6} {beside:>8}: {ips:7.0f} images/s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in runs.items()}
    base = med["compat", "alone"]
    print(
        f"\nsmall-cnn 32 px, {args.images} images, one epoch; {os.cpu_count()} cores; median of "
        f"{args.rounds} rounds (images/s); ratio = images/s over compat's alone ({base:.0f})"
    )
    head = f"{'arm':<8}{'threads':>8}{'alone':>8}{'ratio':>7}{'busy':>8}{'ratio':>7}"
    print(head + f"{'training':>10}{'ratio':>7}")
    report: dict = {"config": vars(args), "arms": {}}
    for arm in ARMS:
        ratio = {b: med[arm, b] / base for b in besides}
        print(
            f"{arm:<8}{threads[arm]:>8}{med[arm, 'alone']:>8.0f}{ratio['alone']:>7.2f}"
            f"{med[arm, 'busy']:>8.0f}{ratio['busy']:>7.2f}"
            f"{med[arm, 'training']:>10.0f}{ratio['training']:>7.2f}"
        )
        report["arms"][arm] = {
            "threads": threads[arm],
            "images_per_s": {b: med[arm, b] for b in besides},
            "ratio": ratio,
        }
    best = max(ARMS, key=lambda a: report["arms"][a]["ratio"]["busy"])
    ok = {a: report["arms"][a]["ratio"]["busy"] >= TARGET for a in ARMS}
    print(
        f"\nbeside one CPU-bound process (target >= {TARGET}x alone): "
        + ", ".join(f"{a} {report['arms'][a]['ratio']['busy']:.2f}x" for a in ARMS)
        + f"; best: {best}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0 if ok["compat"] or ok["knob"] else 1


if __name__ == "__main__":
    sys.exit(main())
