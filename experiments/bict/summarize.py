"""The BiCT lambda sweep summarised and judged: results/lambda.md, lambda.json and lambda.png.

Reads, for every point of params.yaml ``upgrade`` (one v2 version each), its lambda and seed from
params.yaml ``train`` and its committed ``metrics/<point>/compat.json`` (the ``forward`` block:
M(v1, v1), backward M(v2, v1), forward M(v2, psi(v1)), self M(v2, v2), the paired bootstrap
bound of forward - backward, and psi kept or refused with its held-out gain's lower bound).
Writes, per lambda, the mean and min-max over seeds of each cell, and judges expected result 7
(docs/reference.md) by the rules of :data:`RULES`:

* peak: backward top-1 (mean over seeds) peaks at an interior lambda, and at each neighbouring
  lambda every seed lies below every seed at the peak (the min-max ranges do not overlap: the
  drop is larger than the seed spread);
* forward beats backward at small lambda: at every lambda below the peak, forward top-1 is above
  backward on every seed (a refused psi is the identity, so there forward equals backward and
  the seed does not count).

Usage (the ``summarize`` stage of dvc.yaml, or by hand from anywhere): ``python summarize.py
[--check]``; ``--check`` writes nothing and exits 1 when results/lambda.md or lambda.json
differ from what the committed metrics give (tests/test_bict.py does the same).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import fmean
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CELLS = ("old", "backward", "forward", "self")
METRICS = ("top1", "mAP")
HEADERS = {
    "old": "M(v1, v1)",
    "backward": "backward M(v2, v1)",
    "forward": "forward M(v2, psi(v1))",
    "self": "self M(v2, v2)",
}
RULES = {
    "peak": (
        "backward M(v2, v1) top-1, averaged over seeds, is highest at an interior lambda (not the "
        "smallest or largest swept), and at each neighbouring lambda every seed is below every "
        "seed at the peak (lowest seed at the peak > highest seed at the neighbour: the drop is "
        "larger than the seed spread)"
    ),
    "forward": (
        "at every lambda below the peak, forward M(v2, psi(v1)) top-1 is above backward on every "
        "seed (where psi is refused it is the identity and forward equals backward)"
    ),
}


def metrics_path(folder: Path, point: str) -> Path:
    return folder / "metrics" / point / "compat.json"


def load_points(folder: Path = HERE) -> list[dict[str, Any]]:
    """One record per point, in params.yaml order: name, lambda, seed and its numbers.
    FileNotFoundError when a point has no committed metrics."""
    params = yaml.safe_load((folder / "params.yaml").read_text(encoding="utf-8"))
    points = []
    for name in params["upgrade"]:
        train = params["train"][name]
        report = json.loads(metrics_path(folder, name).read_text(encoding="utf-8"))
        fwd = report["forward"][name]
        ident = fwd["metrics"]["identification"]
        psi = fwd.get("psi") or {}
        points.append(
            {
                "name": name,
                "lambda": float(train["method_params"]["lam"]),
                "seed": int(train["seed"]),
                **{m: {c: ident[m][c] for c in CELLS} for m in METRICS},
                "forward_minus_backward_lower_bound": ident["top1"]["forward_minus_backward"][
                    "lower_bound"
                ],
                "psi_refused": psi.get("refused"),
                "psi_held_out_lower_bound": psi.get("held_out_lower_bound"),
            }
        )
    return points


def _spread(values: list[float]) -> dict[str, float]:
    return {"mean": fmean(values), "min": min(values), "max": max(values)}


def summarize(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-lambda statistics over seeds and the judgement of expected result 7 (JSON-able)."""
    lams = sorted({p["lambda"] for p in points})
    per: dict[str, Any] = {}
    for lam in lams:
        ps = sorted((p for p in points if p["lambda"] == lam), key=lambda p: p["seed"])
        bounds = [p["psi_held_out_lower_bound"] for p in ps]
        known = [b for b in bounds if b is not None]
        per[f"{lam:g}"] = {
            "lambda": lam,
            "seeds": [p["seed"] for p in ps],
            "points": [p["name"] for p in ps],
            **{m: {c: _spread([p[m][c] for p in ps]) for c in CELLS} for m in METRICS},
            "forward_above_backward": sum(p["top1"]["forward"] > p["top1"]["backward"] for p in ps),
            "forward_above_backward_confident": sum(
                p["forward_minus_backward_lower_bound"] > 0 for p in ps
            ),
            "psi_refused": sum(p["psi_refused"] is not None for p in ps),
            "psi_held_out_lower_bound": _spread(known) if known else None,
        }
    keys = list(per)
    back = {k: per[k]["top1"]["backward"] for k in keys}
    peak = max(keys, key=lambda k: back[k]["mean"])
    i = keys.index(peak)
    interior = 0 < i < len(keys) - 1
    neighbours = [
        {
            "lambda": per[k]["lambda"],
            "peak_lowest_seed": back[peak]["min"],
            "neighbour_highest_seed": back[k]["max"],
            "mean_drop": back[peak]["mean"] - back[k]["mean"],
            "above_spread": back[peak]["min"] > back[k]["max"],
        }
        for k in (keys[j] for j in (i - 1, i + 1) if 0 <= j < len(keys))
    ]
    peak_held = interior and all(n["above_spread"] for n in neighbours)
    small = keys[:i]
    forward_held = bool(small) and all(
        per[k]["forward_above_backward"] == len(per[k]["seeds"]) for k in small
    )
    reasons = []
    if not interior:
        reasons.append(f"backward peaks at lambda {peak}, the edge of the sweep")
    elif not peak_held:
        within = ", ".join(f"{n['lambda']:g}" for n in neighbours if not n["above_spread"])
        reasons.append(f"the peak at lambda {peak} is within the seed spread of lambda {within}")
    if not small:
        reasons.append("no lambda below the peak")
    elif not forward_held:
        short = ", ".join(
            k for k in small if per[k]["forward_above_backward"] < len(per[k]["seeds"])
        )
        reasons.append(f"forward is not above backward on every seed at lambda {short}")
    return {
        "rules": RULES,
        "lambda": per,
        "peak": {
            "lambda": per[peak]["lambda"],
            "interior": interior,
            "neighbours": neighbours,
            "held": peak_held,
        },
        "forward": {"small_lambdas": [per[k]["lambda"] for k in small], "held": forward_held},
        "verdict": "held" if peak_held and forward_held else "did not hold",
        "reasons": reasons,
        "points": {
            p["name"]: {k: v for k, v in p.items() if k != "name"}
            for p in sorted(points, key=lambda p: (p["lambda"], p["seed"]))
        },
    }


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def spread_text(s: dict[str, float], n: int) -> str:
    """``mean [min, max]`` in percent; one seed (or all seeds equal): the value alone."""
    if n == 1 or s["min"] == s["max"]:
        return pct(s["mean"])
    return f"{pct(s['mean'])} [{pct(s['min'])}, {pct(s['max'])}]"


def psi_text(row: dict[str, Any]) -> str:
    n, refused = len(row["seeds"]), row["psi_refused"]
    b = row["psi_held_out_lower_bound"]
    bound = "" if b is None else f" (held-out gain lower bound {_points(b['min'], b['max'])})"
    if refused == 0:
        return f"kept {n}/{n}{bound}"
    return f"refused {refused}/{n}{bound}"


def _points(lo: float, hi: float) -> str:
    """A fraction range in signed percentage points."""
    return f"{100 * lo:+.2f}" if lo == hi else f"{100 * lo:+.2f} to {100 * hi:+.2f}"


def render(summary: dict[str, Any]) -> str:
    """results/lambda.md."""
    per = summary["lambda"]
    out = [
        "# BiCT lambda sweep",
        "",
        "Written by `summarize.py` (the `summarize` stage of `dvc repro` in experiments/bict) from",
        "`metrics/<point>/compat.json` and params.yaml; tests/test_bict.py fails when this file",
        "differs from what the committed metrics give. Identification on the held-out classes, %;",
        "v1 (25% of the training classes) trained once, each point a v2 `bict` (regression form, 50%",
        "of the classes) with its own seed, and its psi (v1 -> v2).",
    ]
    for metric, title in (("top1", "top-1"), ("mAP", "mAP")):
        out += [
            "",
            f"## Per lambda, {title}: mean [min, max] over seeds",
            "",
            "| lambda | seeds | " + " | ".join(HEADERS[c] for c in CELLS) + " |"
            + (" forward > backward (95% paired bound > 0) | psi |" if metric == "top1" else ""),
            "|---|---|" + "---|" * len(CELLS) + ("---|---|" if metric == "top1" else ""),
        ]  # fmt: skip
        for key, row in per.items():
            n = len(row["seeds"])
            cells = [spread_text(row[metric][c], n) for c in CELLS]
            line = f"| {key} | {', '.join(map(str, row['seeds']))} | " + " | ".join(cells) + " |"
            if metric == "top1":
                line += (
                    f" {row['forward_above_backward']}/{n} "
                    f"({row['forward_above_backward_confident']}/{n}) | {psi_text(row)} |"
                )
            out.append(line)
    out += [
        "",
        "## Per point, top-1 / mAP",
        "",
        "| point | lambda | seed | " + " | ".join(HEADERS[c] for c in CELLS)
        + " | forward - backward, 95% lower bound (top-1) | psi (held-out gain lower bound) |",
        "|---|---|---|" + "---|" * len(CELLS) + "---|---|",
    ]  # fmt: skip
    for name, p in summary["points"].items():
        cells = [f"{pct(p['top1'][c])} / {pct(p['mAP'][c])}" for c in CELLS]
        b = p["psi_held_out_lower_bound"]
        bound = "n/a" if b is None else f"{100 * b:+.2f}"
        psi = f"refused ({bound})" if p["psi_refused"] is not None else f"kept ({bound})"
        out.append(
            f"| {name} | {p['lambda']:g} | {p['seed']} | " + " | ".join(cells)
            + f" | {100 * p['forward_minus_backward_lower_bound']:+.2f} | {psi} |"
        )  # fmt: skip
    peak, fwd = summary["peak"], summary["forward"]
    back = per[f"{peak['lambda']:g}"]["top1"]["backward"]
    nb = "; ".join(
        f"lambda {n['lambda']:g}: lowest seed at the peak {pct(n['peak_lowest_seed'])} vs highest "
        f"seed there {pct(n['neighbour_highest_seed'])}, mean drop {100 * n['mean_drop']:.1f} "
        f"points: {'above' if n['above_spread'] else 'within'} the seed spread"
        for n in peak["neighbours"]
    )
    small = ", ".join(f"{x:g}" for x in fwd["small_lambdas"]) or "none"
    counts = ", ".join(
        f"{row['forward_above_backward']}/{len(row['seeds'])} at {key}" for key, row in per.items()
    )
    refused = [
        f"{row['psi_refused']}/{len(row['seeds'])} at {key}"
        for key, row in per.items()
        if row["psi_refused"]
    ]
    verdict = summary["verdict"] + (f" ({'; '.join(summary['reasons'])})" if summary["reasons"] else "")  # fmt: skip
    out += [
        "",
        "## Expected result 7: judged",
        "",
        f"- Rule, peak: {RULES['peak']}.",
        f"- Rule, forward: {RULES['forward']}.",
        f"- Peak: backward top-1 is highest at lambda {peak['lambda']:g} (mean {pct(back['mean'])}"
        f"{'' if peak['interior'] else ', the edge of the sweep'}); {nb or 'no neighbour'}. "
        f"{'Held' if peak['held'] else 'Did not hold'}.",
        f"- Forward above backward, seeds per lambda: {counts}. Lambdas below the peak: {small}. "
        f"{'Held' if fwd['held'] else 'Did not hold'}.",
        f"- psi refused (the identity saved; forward = backward): "
        f"{', '.join(refused) if refused else 'on no point'}.",
        f"- Result 7: {verdict}.",
    ]
    return "\n".join(out) + "\n"


def dump(summary: dict[str, Any]) -> str:
    """results/lambda.json (keys in the summary's order: lambdas ascending, points by lambda
    and seed)."""
    return json.dumps(summary, indent=2) + "\n"


def plot(summary: dict[str, Any], path: Path) -> None:
    """results/lambda.png: each cell's mean against lambda, the seeds' min-max as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = list(summary["lambda"].values())
    xs = [max(r["lambda"], 0.03) for r in per]  # lambda 0 drawn at the left edge of the log axis
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, metric in zip(axes, METRICS, strict=True):
        for key, label, style in (
            ("backward", "backward M(v2, v1)", "o-"),
            ("forward", "forward M(v2, psi(v1))", "s-"),
            ("self", "self M(v2, v2)", "^--"),
        ):
            s = [r[metric][key] for r in per]
            mean = [100 * x["mean"] for x in s]
            err = [
                [100 * (x["mean"] - x["min"]) for x in s],
                [100 * (x["max"] - x["mean"]) for x in s],
            ]
            ax.errorbar(xs, mean, yerr=err, fmt=style, capsize=3, label=label)
            if key == "forward":  # a refused psi is the identity: forward = backward there
                for x, y, r in zip(xs, mean, per, strict=True):
                    if r["psi_refused"]:
                        note = f"psi refused {r['psi_refused']}/{len(r['seeds'])}"
                        ax.annotate(note, (x, y), textcoords="offset points", xytext=(0, -14),
                                    ha="center", fontsize=7, color="C1")  # fmt: skip
        ax.axhline(100 * per[0][metric]["old"]["mean"], color="gray", ls=":", label="old M(v1, v1)")
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{r['lambda']:g}" for r in per])
        ax.minorticks_off()
        ax.set_xlabel("lambda (backward-compatibility weight)")
        ax.set_ylabel(f"identification {metric} (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("BiCT: backward vs forward compatibility as lambda grows (mean, seeds' min-max)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None, folder: Path = HERE) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if results/ differ; write nothing")
    args = ap.parse_args(argv)
    try:
        summary = summarize(load_points(folder))
    except FileNotFoundError as err:
        print(f"error: {err.filename}: no metrics; run `dvc repro` in {folder}", file=sys.stderr)
        return 3
    results = folder / "results"
    texts = {results / "lambda.md": render(summary), results / "lambda.json": dump(summary)}
    if args.check:
        stale = [
            p.name for p, t in texts.items() if not p.exists() or p.read_text(encoding="utf-8") != t
        ]
        if stale:
            print(f"{', '.join(stale)}: out of date; run python summarize.py", file=sys.stderr)
            return 1
        return 0
    results.mkdir(exist_ok=True)
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
    plot(summary, results / "lambda.png")
    print(texts[results / "lambda.md"], end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
