"""The evaluation report's images (matplotlib, Agg backend: no display needed).

* :func:`plot_images`: ``plots/heatmap_<protocol>.png``, the compatibility matrix M[query][gallery]
  of each protocol, a panel per metric, with the sequence metrics (AC/AA/BC/FC) under each
  title; and ``plots/cmc.png``, the CMC curve of every identification cell.
* :func:`plot_backfill`: ``plots/backfill_<new>.png``, the partial-backfill curve of each new
  version with an upgrade module psi (BiCT), a panel per protocol.

The writers (:func:`compat.evaluate.report.write_report`,
:func:`compat.evaluate.forward.write_forward`) call these; they read only the JSON report.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from compat.io import storage_errors, write_bytes


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
    with storage_errors(out_dir):
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
        _save(fig, path)
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
        _save(fig, path)
        written.append(path)
    return written


def plot_backfill(forward: Mapping[str, Any], plots_dir: str | os.PathLike[str]) -> list[Path]:
    """One PNG per new version: a panel per protocol, metric vs share of the gallery upgraded,
    with M(new, new) (re-embedding every image) dashed for reference."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out_dir = Path(plots_dir)
    with storage_errors(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for new, entry in forward.items():
        protocols = list(entry["metrics"])
        if not protocols:
            continue
        fig = Figure(figsize=(4.2 * len(protocols), 3.6), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, len(protocols), squeeze=False)[0]
        for ax, protocol in zip(axes, protocols, strict=True):
            for metric, e in entry["metrics"][protocol].items():
                xs = [pt["fraction"] for pt in e["curve"]]
                ys = [np.nan if pt["value"] is None else pt["value"] for pt in e["curve"]]
                (line,) = ax.plot(xs, ys, "-", marker="o", label=metric)
                raw = [np.nan if pt["value"] is None else pt["value"] for pt in e["curve_raw"]]
                ax.plot(
                    [pt["fraction"] for pt in e["curve_raw"]], raw, ":",
                    color=line.get_color(), linewidth=0.8,
                )  # fmt: skip
                if e.get("self") is not None:
                    ax.axhline(e["self"], color=line.get_color(), linestyle="--", linewidth=0.8)
            ax.set_xlim(-0.02, 1.02)
            ax.set_ylim(0, 1)
            ax.set_xlabel(f"share of the {entry['from']} gallery upgraded by psi")
            ax.set_ylabel(f"M({new}, mixed gallery)")
            ax.set_title(protocol)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(
            f"partial backfill {entry['from']} -> {new} (dotted: raw scores; "
            f"dashed: M({new}, {new}), re-embedded)"
        )
        path = out_dir / f"backfill_{new}.png"
        _save(fig, path)
        written.append(path)
    return written


def _save(fig: Any, path: Path) -> None:
    """Write a PNG through a temporary file, so a kill never leaves half a picture; drawn in
    memory first, so a full disk names the bytes the picture needs."""
    png = io.BytesIO()
    fig.savefig(png, dpi=110, format="png")
    write_bytes(path, png.getvalue())
