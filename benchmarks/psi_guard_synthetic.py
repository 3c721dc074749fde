"""psi's guard against making a gallery worse, on synthetic pairs shaped like the hard setting
(issue 17: psi fitted on 2,000 pairs of 100 training classes, a v2 space close to v1's).

    python benchmarks/psi_guard_synthetic.py [--shift 0.35 1.0 0.6]

Each "world" draws a latent image z per item (class centre + noise, d = 128); v1 embeds it as
unit(z + noise), v2 as unit(z A + tanh(z B) + noise) with A = I + shift * G / sqrt(d): ``shift``
sets how far v2's space is from v1's, so how much psi can add over using v1 rows as they are.
psi is fitted on 100 classes x 20 items and scored on 200 unseen classes x 20: v2 queries
against the gallery psi(v1) (forward) and against v1 left alone (backward), top-1 with each
query's own pair left out. Rows: the former default (plain MLP, 50 epochs, always kept) and the
residual psi with early stopping and the refusal, per held-out share and weight decay.
Measured numbers: docs/findings.md, "Backfill and psi".
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from compat.maps.psi import upgrade_array
from compat.maps.psi_config import UpgradeConfig
from compat.maps.psi_fit import fit_upgrade
from compat.maps.psi_heldout import heldout_top1

D = 128


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def world(shift: float):
    rng = np.random.default_rng(0)
    a = np.eye(D) + shift * rng.standard_normal((D, D)) / np.sqrt(D)
    b = 0.5 * rng.standard_normal((D, D)) / np.sqrt(D)

    def make(classes: int, per: int, seed: int):
        r = np.random.default_rng(seed)
        centres = r.standard_normal((classes, D))
        labels = np.repeat(np.arange(classes), per)
        z = centres[labels] + 2.2 * r.standard_normal((len(labels), D))
        old = unit(z + 1.5 * r.standard_normal(z.shape))
        new = unit(z @ a + np.tanh(z @ b) + 1.0 * r.standard_normal(z.shape))
        return old, new, labels.tolist()

    return make


SETTINGS = [
    ("former default: plain MLP, 50 epochs, kept", dict(residual=False, patience=None, refuse=False, monitor="loss", weight_decay=0.0, val_fraction=0.1)),
    ("residual, held out 10%, wd 0", dict(val_fraction=0.1, weight_decay=0.0)),
    ("residual, held out 10%, wd 0.01", dict(val_fraction=0.1, weight_decay=0.01)),
    ("residual, held out 10%, wd 0.1", dict(val_fraction=0.1, weight_decay=0.1)),
    ("residual, held out 20%, wd 0", dict(val_fraction=0.2, weight_decay=0.0)),
    ("residual, held out 20%, wd 0.01", dict(val_fraction=0.2, weight_decay=0.01)),
    ("residual, held out 20%, wd 0.1 (default)", dict(val_fraction=0.2, weight_decay=0.1)),
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shift", type=float, nargs="+", default=[0.35, 1.0, 0.6])
    args = parser.parse_args()
    torch.set_num_threads(1)
    for shift in args.shift:
        make = world(shift)
        old, new, labels = make(100, 20, 1)
        e_old, e_new, e_labels = make(200, 20, 2)
        queries = torch.from_numpy(e_new)
        backward = heldout_top1(queries, torch.from_numpy(e_old), e_labels)
        print(f"shift {shift}: unseen backward top-1 {100 * backward:.1f}")
        for name, over in SETTINGS:
            t0 = time.perf_counter()
            cfg = UpgradeConfig(**{"hidden": 256, "epochs": 50, "device": "cpu", **over})
            fit = fit_upgrade(old, new, cfg, labels=labels, quiet=True)
            up = torch.from_numpy(upgrade_array(fit.psi, e_old))
            forward = heldout_top1(queries, up, e_labels)
            s = fit.summary
            lower = s.get("val_top1_gain_lower_bound", float("nan"))
            print(
                f"  {name}: forward {100 * forward:.1f} (backward {100 * backward:.1f}); "
                f"{'refused' if fit.refused else 'kept'}; held-out {100 * s['val_top1']:.1f} "
                f"vs {100 * s['val_top1_without_upgrade']:.1f}, gain lower bound "
                f"{100 * lower:+.1f}; best epoch {s['best_epoch']}/{s['epochs_run']}; "
                f"{time.perf_counter() - t0:.1f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
