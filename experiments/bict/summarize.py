"""The BiCT lambda trade-off from this folder's DVC experiments: a table and a curve.

Reads ``dvc exp show --json --all-commits`` (every experiment of this pipeline, on any commit, queued with
``dvc exp run --queue -S 'train.v2.method_params.lam=...'``), takes each one's
``metrics/forward.json`` (M(v1, v1), backward M(v2, v1), forward M(v2, psi(v1)), self M(v2, v2))
and writes ``results/lambda.md`` and ``results/lambda.png``: identification top-1 and mAP
against lambda (BiCT, Su et al.; docs/reference.md expected result 7).

Usage (from the repository root or this folder): ``python experiments/bict/summarize.py``
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This folder is a DVC project of its own: `dvc exp show --json` names files relative to it.
METRICS = "metrics/forward.json"
PARAMS = "params.yaml"


def rows_from(exp_show: list[dict]) -> list[dict]:
    """One row per finished experiment (and the committed baseline): lambda and the metrics."""
    out: dict[float, dict] = {}
    for entry in exp_show:
        revs = [entry] + [r for x in entry.get("experiments") or [] for r in x["revs"]]
        for rev in revs:
            data = rev.get("data") or {}
            fw = (data.get("metrics") or {}).get(METRICS, {}).get("data", {})
            params = (data.get("params") or {}).get(PARAMS, {}).get("data", {})
            cell = fw.get("v2", {}).get("identification")
            if not cell or not params:
                continue  # queued, failed, or the workspace without results
            lam = float(params["train"]["v2"]["method_params"]["lam"])
            out[lam] = {
                "lam": lam,
                "name": rev.get("name") or rev["rev"][:7],
                **{
                    f"{k}_{m}": 100 * cell[m][k]
                    for m in ("top1", "mAP")
                    for k in ("old", "backward", "forward", "self")
                },
            }
    return [out[k] for k in sorted(out)]


def main() -> int:
    r = subprocess.run(
        ["dvc", "exp", "show", "--json", "--all-commits"], cwd=HERE, capture_output=True, text=True
    )
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return r.returncode
    rows = rows_from(json.loads(r.stdout))
    if not rows:
        print("error: no finished experiment with metrics/forward.json", file=sys.stderr)
        return 3
    lines = [
        "| lambda | M(v1, v1) | backward M(v2, v1) | forward M(v2, psi(v1)) | self M(v2, v2) |",
        "|---|---|---|---|---|",
    ]
    for x in rows:
        lines.append(
            f"| {x['lam']:g} | "
            + " | ".join(
                f"{x[f'{k}_top1']:.1f} / {x[f'{k}_mAP']:.1f}"
                for k in ("old", "backward", "forward", "self")
            )
            + " |"
        )
    lines.append("\nidentification top-1 / mAP %, held-out classes; v1 25%, v2 50% of the classes.")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "lambda.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    xs = [max(x["lam"], 0.03) for x in rows]  # lambda 0 drawn at the left edge of the log axis
    for ax, metric in zip(axes, ("top1", "mAP"), strict=True):
        for key, label, style in (
            ("backward", "backward M(v2, v1)", "o-"),
            ("forward", "forward M(v2, psi(v1))", "s-"),
            ("self", "self M(v2, v2)", "^--"),
        ):
            ax.plot(xs, [x[f"{key}_{metric}"] for x in rows], style, label=label)
        ax.axhline(rows[0][f"old_{metric}"], color="gray", ls=":", label="old M(v1, v1)")
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x['lam']:g}" for x in rows])
        ax.set_xlabel("lambda (backward-compatibility weight)")
        ax.set_ylabel(f"identification {metric} (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("BiCT: backward vs forward compatibility as lambda grows")
    fig.tight_layout()
    fig.savefig(out / "lambda.png", dpi=110)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
