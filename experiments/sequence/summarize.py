"""DVC stage ``summary``: the methods side by side.

Reads ``metrics/<section>/compat.json`` for every section of evaluate.yaml (what
``stages/evaluate.py`` wrote; one per method and identification gallery: ``hoc`` searches
every gallery item, ``hoc-template`` one template per class) and params.yaml ``train`` (to mark
the replaced tasks); writes ``metrics/summary.json`` (AC, AA, BC, FC per section, protocol and
metric; AA before and with each replacement) and one figure per gallery, ``plots/summary.png``
(instance) and ``plots/summary-template.png`` (each method's identification top-1 matrix, lower
triangle, with its sequence metrics in the title), and prints a Markdown table of each.

A formatter over the evaluate stage's reports, which the comparison engine
(:mod:`compat.compare`) made: the matrices are read back with
:func:`compat.compare.matrix.as_array`, AA of a leading block is :func:`compat.compare.matrix.aa`
and a cross test is marked when the report's difference M[i][j] - M[j][j] (BCT Eq. 2) is
positive; nothing here recomputes an interval, a difference or a gain.
Usage (from experiments/sequence): ``python summarize.py [--metric top1]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from compat.compare import matrix as mx
from compat.io import write_json


def replaced(train: dict[str, Any], chain: list[str]) -> set[str]:
    """The model replacements of ``chain``: versions that do not continue the previous one
    (another parent, e.g. a pre-trained model, or trained from scratch although they have one)."""
    out = set()
    for k, v in enumerate(chain[1:], start=1):
        cfg = train.get(v, {})
        if cfg.get("parent") != chain[k - 1] or cfg.get("init", "scratch") == "scratch":
            out.add(v)
    return out


def matrix(report: dict[str, Any], protocol: str, metric: str) -> np.ndarray:
    """The report's M[query][gallery] over its chain (NaN where it has no value)."""
    rows = report["matrix"][protocol][metric]
    values = {(q, g): v for q, row in rows.items() for g, v in row.items()}
    return mx.as_array(values, report["chain"])


def compatible(report: dict[str, Any], protocol: str, metric: str) -> set[tuple[int, int]]:
    """(i, j) of the cross tests whose difference M[i][j] - M[j][j] is positive (BCT Eq. 2)."""
    chain = report["chain"]
    rows = report.get("difference", {}).get(protocol, {}).get(metric, {})
    return {
        (chain.index(new), chain.index(old))
        for new, row in rows.items()
        for old, diff in row.items()
        if diff["value"] is not None and diff["value"] > 0
    }


def _numbers(seq: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in seq.items() if k != "strict_ac"}


def across_replacement(m: np.ndarray, r: int) -> dict[str, float]:
    """How the chain fares across the replacement at index r (0-based, r >= 1).

    ``aa_before``/``aa_with``: AA of the leading r x r / (r+1) x (r+1) block (before and with
    the replacement's row); ``cross_mean``: mean of M[r][j] over the older galleries j < r,
    ``self_mean``: mean of their own self tests M[j][j]. AA "collapses" when the replacement's
    queries cannot search the older galleries (cross tests near chance).
    """
    return {
        "aa_before": mx.aa(m[:r, :r]),
        "aa_with": mx.aa(m[: r + 1, : r + 1]),
        "cross_mean": float(m[r, :r].mean()),
        "self_mean": float(np.diag(m)[:r].mean()),
    }


def markdown(reports: dict[str, Any], marks: set[str], protocol: str, metric: str) -> str:
    lines = [
        f"| method | AC | AA (%) | BC (%) | FC (%) |",  # noqa: F541
        "|---|---|---|---|---|",
    ]
    for method, rep in reports.items():
        s = rep["sequence"][protocol][metric]
        pct = [("n/a" if s[k] is None else f"{100 * s[k]:.1f}") for k in ("aa", "bc", "fc")]
        ac = "n/a" if s["ac"] is None else f"{s['ac']:.2f}"
        lines.append(f"| {method} | {ac} | " + " | ".join(pct) + " |")
    for method, rep in reports.items():
        chain = rep["chain"]
        m = matrix(rep, protocol, metric)
        names = [f"{v}*" if v in marks else v for v in chain]
        lines += ["", f"{method}: {protocol} {metric} (%), M[query][gallery]", ""]
        lines.append("| query \\ gallery | " + " | ".join(names) + " |")
        lines.append("|---" * (len(chain) + 1) + "|")
        for i, q in enumerate(names):
            cells = [
                f"{100 * m[i, j]:.1f}" if j <= i and np.isfinite(m[i, j]) else ""
                for j in range(len(chain))
            ]
            lines.append(f"| {q} | " + " | ".join(cells) + " |")
    if marks:
        lines += ["", "\\* a replacement: a model that does not continue the previous version."]
    return "\n".join(lines)


def _metrics_line(s: dict[str, Any]) -> str:
    def pct(k: str) -> str:
        return "n/a" if s[k] is None else f"{100 * s[k]:.1f}"

    ac = "n/a" if s["ac"] is None else f"{s['ac']:.2f}"
    return f"AC {ac}  AA {pct('aa')}\nBC {pct('bc')}  FC {pct('fc')}"


def plot(reports: dict[str, Any], marks: set[str], protocol: str, metric: str, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = max(len(r["chain"]) for r in reports.values())
    side = 0.55 * n + 1.4
    fig = Figure(figsize=(side * len(reports), side + 0.9), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(reports), squeeze=False)[0]
    mats = {}
    for method, rep in reports.items():
        m = matrix(rep, protocol, metric)
        m[np.triu_indices(len(rep["chain"]), k=1)] = np.nan  # a gallery is never newer
        mats[method] = m
    top = max(1e-9, *(float(np.nanmax(m)) for m in mats.values()))  # one scale for all panels
    for ax, (method, rep) in zip(axes, reports.items(), strict=True):
        chain, m = rep["chain"], mats[method]
        ok = compatible(rep, protocol, metric)
        ax.imshow(m, vmin=0.0, vmax=top, cmap="viridis")
        for (i, j), v in np.ndenumerate(m):
            if np.isfinite(v):
                ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=8,
                        color="white" if v < 0.6 * top else "black",
                        fontweight="bold" if (i, j) in ok else "normal")  # fmt: skip
        names = [f"{v.split('-')[-1]}*" if v in marks else v.split("-")[-1] for v in chain]
        ax.set_xticks(range(len(chain)), names)
        ax.set_yticks(range(len(chain)), names)
        ax.set_xlabel("gallery version")
        ax.set_ylabel("query version")
        ax.set_title(f"{method}\n{_metrics_line(rep['sequence'][protocol][metric])}", fontsize=9)
    fig.suptitle(
        f"{protocol} {metric} (%); bold: cross test above the gallery's self test; * replacement",
        fontsize=9,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", default="identification")
    parser.add_argument("--metric", default="top1")
    args = parser.parse_args(argv)
    sections = yaml.safe_load(Path("evaluate.yaml").read_text())
    train = yaml.safe_load(Path("params.yaml").read_text()).get("train", {})
    marks = set().union(*(replaced(train, s["chain"]) for s in sections.values()))
    reports = {}
    for method in sections:
        path = Path("metrics") / method / "compat.json"
        if not path.is_file():
            print(f"error: {path}: not found; run the evaluate stage first", file=sys.stderr)
            return 3
        reports[method] = json.loads(path.read_text())
    summary = {}
    for method, rep in reports.items():
        m = matrix(rep, args.protocol, args.metric)
        summary[method] = {
            **{p: {k: _numbers(v) for k, v in seq.items()} for p, seq in rep["sequence"].items()},
            "replacement": {
                v: across_replacement(m, rep["chain"].index(v)) for v in rep["chain"] if v in marks
            },
        }
    write_json("metrics/summary.json", summary)
    galleries: dict[str, dict[str, Any]] = {}
    for name, section in sections.items():
        galleries.setdefault(section.get("gallery", "instance"), {})[name] = reports[name]
    for gallery, group in galleries.items():
        png = "summary.png" if gallery == "instance" else f"summary-{gallery}.png"
        plot(group, marks, args.protocol, args.metric, Path("plots") / png)
        print(f"\n### {gallery} gallery\n")
        print(markdown(group, marks, args.protocol, args.metric))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
