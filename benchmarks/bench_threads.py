"""Training beside other work: images/s alone and with another CPU-bound process, side by side.

compat sets ``OMP_WAIT_POLICY=PASSIVE`` (and sizes thread pools to the cores a process may use)
when it is imported, before torch loads OpenMP (compat/threads.py). This measures why: the same
training (small-cnn, 32 px, compat's fit loop, one epoch of synthetic images) in a fresh process,
in two arms:

- ``compat``: the process imports compat first (compat's defaults);
- ``torch``: it imports torch first, so OpenMP starts with its own defaults (idle threads spin);

each alone, beside a busy pure-Python loop (one core's worth of other work), and beside a second
copy of the same training (``dvc queue start -j 2``, or a test run beside a training). Rounds
interleave the arms so a drifting host slows both alike. The target (issue 40): with one other
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


def _env() -> dict[str, str]:
    """The caller's environment without any OpenMP or compat thread setting."""
    drop = ("OMP_", "GOMP_", "KMP_", "MKL_NUM_THREADS", "COMPAT_THREADS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _cmd(args: argparse.Namespace, arm: str, loop: bool = False) -> list[str]:
    cmd = [sys.executable, __file__, "--child", "--images", str(args.images)]
    return cmd + (["--torch-first"] if arm == "torch" else []) + (["--loop"] if loop else [])


def measure(args: argparse.Namespace, arm: str, beside: str) -> tuple[float, int]:
    other = None
    if beside == "busy":
        other = subprocess.Popen([sys.executable, "-c", BUSY], env=_env())
    elif beside == "training":
        other = subprocess.Popen(_cmd(args, arm, loop=True), env=_env())
        time.sleep(args.settle)  # the other training past its imports and warm-up
    try:
        out = subprocess.run(_cmd(args, arm), env=_env(), capture_output=True, text=True)
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
    arms, besides = ("compat", "torch"), ("alone", "busy", "training")
    runs: dict[tuple[str, str], list[float]] = {(a, b): [] for a in arms for b in besides}
    threads = {}
    for r in range(args.rounds):
        for beside in besides:
            order = arms if r % 2 == 0 else arms[::-1]
            for arm in order:
                ips, threads[arm] = measure(args, arm, beside)
                runs[arm, beside].append(ips)
                print(f"round {r + 1}: {arm:>6} {beside:>8}: {ips:7.0f} images/s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(
        f"\nsmall-cnn 32 px, {args.images} images, one epoch; {os.cpu_count()} cores; median of "
        f"{args.rounds} rounds (images/s), ratio = beside / alone of the same arm"
    )
    print(
        f"{'arm':<8}{'threads':>8}{'alone':>9}{'busy':>9}{'ratio':>7}{'training':>10}{'ratio':>7}"
    )
    report: dict = {"config": vars(args), "arms": {}}
    for arm in arms:
        alone = med[arm, "alone"]
        busy, train = med[arm, "busy"] / alone, med[arm, "training"] / alone
        print(
            f"{arm:<8}{threads[arm]:>8}{alone:>9.0f}{med[arm, 'busy']:>9.0f}{busy:>7.2f}"
            f"{med[arm, 'training']:>10.0f}{train:>7.2f}"
        )
        report["arms"][arm] = {
            "threads": threads[arm],
            "images_per_s": {b: med[arm, b] for b in besides},
            "ratio_busy": busy,
            "ratio_training": train,
        }
    ok = report["arms"]["compat"]["ratio_busy"] >= TARGET
    speed = med["compat", "alone"] / med["torch", "alone"]
    print(
        f"\ncompat's defaults alone: {speed:.2f}x torch's. Beside one CPU-bound process: "
        f"{report['arms']['compat']['ratio_busy']:.2f}x alone (target >= {TARGET}): "
        f"{'ok' if ok else 'MISSED'}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
