"""Evaluate a chain of versions on the evaluation manifest and write what DVC and people read.

:func:`evaluate_chain` is the whole evaluation given per-version embedding matrices: every
matrix cell for every protocol, paired bootstrap intervals, differences M(q, g) - M(g, g),
update gains against the paragons and the sequence metrics. :func:`write_report` writes:

* ``metrics/compat.json``: everything (matrix, intervals, differences, gains, sequence metrics)
* ``metrics/<protocol>.json``: flat numbers for ``dvc metrics show`` / ``diff``
  (``M.<query>.<gallery>.<metric>``, ``gain.<new>.<old>.<metric>``, ``sequence.<metric>.ac``)
* ``plots/cmc/<query>_on_<gallery>.json``: CMC curves, ``[{"rank": r, "accuracy": a}]``, one
  file per cell, for ``dvc plots`` (declare the folder with ``x: rank, y: accuracy``)
* ``plots/heatmap_<protocol>.png`` and ``plots/cmc.png`` (matplotlib, Agg; no display needed)
* with a ``forward`` section (upgrade modules, :mod:`compat.evaluate.forward`):
  ``metrics/forward.json``, ``plots/backfill/<new>_<protocol>.json`` (x: fraction) and
  ``plots/backfill_<new>.png``

Keys of JSON objects are versions and metric names; undefined values are ``null``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from compat.compare import matrix as mx
from compat.compare.bootstrap import Bootstrap, bootstrap, lower_bound, percentile_interval
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.protocols import (
    EvalSetLike,
    ProtocolResult,
    create_protocols,
    evaluate_manifest,
    label_codes,
)
from compat.io import write_json

Cell = tuple[str, str]


def _num(x: float | None) -> float | None:
    """JSON-safe float: NaN/inf/None -> None."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _pair(interval: tuple[float, float]) -> list[float | None]:
    return [_num(interval[0]), _num(interval[1])]


def evaluation_cells(config: EvaluateConfig) -> list[Cell]:
    """Chain cells (lower triangle or full square) plus each paragon's self test."""
    cells = mx.matrix_cells(config.chain, config.full_square)
    for p in config.paragon.values():
        if (p, p) not in cells:
            cells.append((p, p))
    return cells


def evaluate_chain(
    manifest: EvalSetLike,
    embeddings: Mapping[str, np.ndarray],
    config: EvaluateConfig,
) -> dict[str, Any]:
    """The full evaluation report (a JSON-able dict) from per-version embeddings.

    ``embeddings[v]`` is version v's (len(manifest.items), d) matrix, rows aligned with
    ``manifest.items``; it must hold every version in ``config.versions()``.
    """
    missing = [v for v in config.versions() if v not in embeddings]
    if missing:
        raise ValueError(f"no embeddings for version(s): {', '.join(missing)}")
    protocols = create_protocols(config.protocols, **config.protocol_options())
    codes = label_codes(manifest.labels)
    cells = evaluation_cells(config)
    results: dict[Cell, dict[str, ProtocolResult]] = {}
    skipped: list[dict[str, str]] = []
    for q, g in cells:
        dq, dg = embeddings[q].shape[1], embeddings[g].shape[1]
        if dq != dg:
            # Embeddings of different widths have no inner product: the cell stays empty
            # (null in the report) rather than guessing a truncation or padding convention.
            skipped.append(
                {"query": q, "gallery": g, "reason": f"dimensions differ ({dq} vs {dg})"}
            )
            results[(q, g)] = {}
            continue
        results[(q, g)] = evaluate_manifest(
            manifest,
            embeddings[q],
            embeddings[g],
            protocols,
            chunk_size=config.chunk_size,
            device=config.device,
            codes=codes,
        )

    report: dict[str, Any] = {
        "chain": list(config.chain),
        "paragon": dict(config.paragon),
        "protocols": list(config.protocols),
        "bootstrap": {
            "resamples": config.bootstrap,
            "seed": config.seed,
            "confidence": config.confidence,
            "interval": "percentile",
        },
        "cells": [[q, g] for q, g in cells],
        "skipped": skipped,
        "counts": {},
        "matrix": {},
        "interval": {},
        "difference": {},
        "gain": {},
        "sequence": {},
        "cmc": {},
    }
    for p in protocols:
        per_cell = {c: r[p.name] for c, r in results.items() if p.name in r}
        boot = bootstrap(per_cell, resamples=config.bootstrap, seed=config.seed, stream=p.name)
        if per_cell:
            report["counts"][p.name] = next(iter(per_cell.values())).counts
        for metric in p.metric_names():
            _fill_metric(report, p.name, metric, per_cell, boot, config)
        if p.name == "identification":
            report["cmc"] = {f"{q}/{g}": r.curves["cmc"] for (q, g), r in per_cell.items()}
    return report


def _nested(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    for k in keys:
        d = d.setdefault(k, {})
    return d


def _fill_metric(
    report: dict[str, Any],
    protocol: str,
    metric: str,
    per_cell: Mapping[Cell, ProtocolResult],
    boot: Bootstrap,
    config: EvaluateConfig,
) -> None:
    conf = config.confidence
    value = {c: r.metrics[metric] for c, r in per_cell.items()}
    has_samples = config.bootstrap > 0
    for (q, g), v in value.items():
        _nested(report["matrix"], protocol, metric, q)[g] = _num(v)
        if has_samples:
            _nested(report["interval"], protocol, metric, q)[g] = _pair(
                boot.interval((q, g), metric, conf)
            )

    chain = config.chain
    for i, new in enumerate(chain):
        for old in chain[:i]:
            cross, self_old = (new, old), (old, old)
            if cross not in value or self_old not in value:
                continue
            diff: dict[str, Any] = {"value": _num(value[cross] - value[self_old])}
            if has_samples:
                d = boot.difference(cross, self_old, metric)
                diff["interval"] = _pair(percentile_interval(d, conf))
                diff["lower_bound"] = _num(lower_bound(d, conf))
            _nested(report["difference"], protocol, metric, new)[old] = diff
            paragon = config.paragon.get(new)
            if paragon is None or (paragon, paragon) not in value:
                continue
            gain = mx.update_gain(value[cross], value[self_old], value[(paragon, paragon)])
            entry: dict[str, Any] = {"paragon": paragon, **gain.to_json()}
            entry["value"] = _num(gain.value)
            if has_samples:
                s = boot.samples
                g_samples = mx.gain_samples(
                    s[cross][metric], s[self_old][metric], s[(paragon, paragon)][metric]
                )
                entry["interval"] = _pair(percentile_interval(g_samples, conf))
            _nested(report["gain"], protocol, metric, new)[old] = entry

    m = mx.as_array({c: v for c, v in value.items()}, chain)
    seq = mx.sequence_metrics(m, strict=config.strict_ac)
    _nested(report["sequence"], protocol)[metric] = {
        **{k: _num(v) for k, v in seq.items()},
        "strict_ac": config.strict_ac,
    }


# ---------------------------------------------------------------------------- writing


def flat_metrics(report: Mapping[str, Any], protocol: str) -> dict[str, Any]:
    """What ``metrics/<protocol>.json`` holds: numbers only, nested for ``dvc metrics``."""
    out: dict[str, Any] = {"M": {}, "gain": {}, "sequence": {}}
    for metric, rows in report["matrix"].get(protocol, {}).items():
        for q, row in rows.items():
            for g, v in row.items():
                _nested(out["M"], q, g)[metric] = v
    for metric, rows in report["gain"].get(protocol, {}).items():
        for new, row in rows.items():
            for old, entry in row.items():
                _nested(out["gain"], new, old)[metric] = entry["value"]
    for metric, seq in report["sequence"].get(protocol, {}).items():
        out["sequence"][metric] = {k: v for k, v in seq.items() if k != "strict_ac"}
    return out


def _cell_file(cell: str) -> str:
    q, g = cell.split("/", 1)
    return f"{q}_on_{g}.json"


def write_report(
    report: Mapping[str, Any],
    metrics_dir: str | os.PathLike[str] = "metrics",
    plots_dir: str | os.PathLike[str] = "plots",
    *,
    images: bool = True,
) -> list[Path]:
    """Write the metrics, plot data and (``images``) PNGs; return the paths written."""
    mdir, pdir = Path(metrics_dir), Path(plots_dir)
    written = [mdir / "compat.json"]
    write_json(written[0], report)
    for protocol in report["protocols"]:
        path = mdir / f"{protocol}.json"
        write_json(path, flat_metrics(report, protocol))
        written.append(path)
    for cell, curve in report.get("cmc", {}).items():
        path = pdir / "cmc" / _cell_file(cell)
        rows = [{"rank": r + 1, "accuracy": _num(a)} for r, a in enumerate(curve)]
        write_json(path, rows)
        written.append(path)
    if images:
        written += plot_images(report, pdir)
    if report.get("forward"):
        from compat.evaluate.forward import write_forward

        written += write_forward(report["forward"], mdir, pdir, images=images)
    return written


def _sequence_line(seq: Mapping[str, Any] | None, length: int) -> str:
    """AC/AA/BC/FC under a heatmap panel's title, for chains of three or more versions."""
    if not seq or length < 3:
        return ""

    def pct(key: str) -> str:
        v = seq.get(key)
        return "n/a" if v is None else f"{100 * v:.1f}"

    ac = "n/a" if seq.get("ac") is None else f"{seq['ac']:.2f}"
    return f"\nAC {ac}  AA {pct('aa')}\nBC {pct('bc')}  FC {pct('fc')}"


def plot_images(report: Mapping[str, Any], plots_dir: str | os.PathLike[str]) -> list[Path]:
    """Compatibility heatmaps (one PNG per protocol, a panel per metric) and the CMC curves."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    out_dir = Path(plots_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    versions = list(report["chain"])
    for p in report["paragon"].values():
        if p not in versions:
            versions.append(p)
    for protocol, by_metric in report["matrix"].items():
        metrics = list(by_metric)
        if not metrics:
            continue
        n = len(versions)
        # Cells keep ~0.5 in a side however long the chain, so a 7-version sequence stays
        # readable; short chains keep the old 3.2 in panels.
        panel = max(3.2, 0.5 * n + 1.0)
        fig = Figure(
            figsize=(panel * len(metrics) + 0.5, max(0.45 * n + 2.2, 0.5 * n + 1.6)),
            layout="constrained",
        )
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, len(metrics), squeeze=False)[0]
        fontsize = 8 if n <= 8 else 6
        sequence = report.get("sequence", {}).get(protocol, {})
        for ax, metric in zip(axes, metrics, strict=True):
            grid = np.full((n, n), np.nan)
            for qi, q in enumerate(versions):
                for gi, g in enumerate(versions):
                    v = by_metric[metric].get(q, {}).get(g)
                    grid[qi, gi] = np.nan if v is None else v
            ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis")
            for (qi, gi), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    ax.text(
                        gi,
                        qi,
                        f"{100 * v:.1f}",
                        ha="center",
                        va="center",
                        fontsize=fontsize,
                        color="white" if v < 0.6 else "black",
                    )
            ax.set_xticks(range(n), versions, rotation=45, ha="right")
            ax.set_yticks(range(n), versions)
            ax.set_xlabel("gallery version")
            ax.set_ylabel("query version")
            ax.set_title(metric + _sequence_line(sequence.get(metric), len(report["chain"])))
        fig.suptitle(f"{protocol}: M[query][gallery] (%)")
        path = out_dir / f"heatmap_{protocol}.png"
        fig.savefig(path, dpi=110)
        written.append(path)

    if report.get("cmc"):
        fig = Figure(figsize=(6, 4), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        for cell, curve in report["cmc"].items():
            q, g = cell.split("/", 1)
            style = "-" if q == g else "--"
            ax.plot(
                range(1, len(curve) + 1),
                [np.nan if a is None else a for a in curve],
                style,
                marker=".",
                label=f"query {q} / gallery {g}",
            )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("rank")
        ax.set_ylabel("identification accuracy (CMC)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        path = out_dir / "cmc.png"
        fig.savefig(path, dpi=110)
        written.append(path)
    return written
