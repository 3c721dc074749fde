"""The evaluation report's images (matplotlib, Agg backend: no display needed).

* :func:`draw_heatmap`: the one drawing of the compatibility matrix M[query][gallery] as a heat
  map, a panel per metric; :class:`HeatmapStyle` holds what differs with where it is shown
  (panels a row, panel size, cell font, axis labels, dpi). The registry's run page draws its
  heat maps with it too (:func:`compat.registry.run_page.heatmaps`).
* :func:`plot_images`: ``plots/heatmap_<protocol>.png``, that heat map of each protocol
  (:data:`REPORT_STYLE`), with the sequence metrics (AC/AA/BC/FC) under each panel's title; and
  ``plots/cmc.png``, the CMC curve of every identification cell.
* :func:`plot_backfill`: ``plots/backfill_<new>.png``, the partial-backfill curve of each new
  version with an upgrade module psi (BiCT), a panel per protocol.

The writers (:func:`compat.evaluate.report.write_report`,
:func:`compat.evaluate.forward.write_forward`) call these; they read only the JSON report.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class HeatmapStyle:
    """How big a heat map is drawn, which depends on where it is shown; what it shows (cells in
    %, viridis from 0 to 1, white text on dark cells) is the same everywhere."""

    per_row: int | None = None  # metric panels side by side, then the next row; None: one row
    min_side: float = 3.2  # a panel's side in inches, however short the chain
    cell_font: float = 8.0  # the values in the cells (in %)
    long_cell_font: float = 6.0  # the same past 8 versions, where the figure is already large
    axis_labels: bool = True  # "gallery version" under, "query version" beside each panel
    dpi: int = 110


REPORT_STYLE = HeatmapStyle()  # plots/heatmap_<protocol>.png, read beside the metrics files

Grid = Mapping[str, Mapping[str, float | None]]  # M[query][gallery]; a missing cell is blank


def draw_heatmap(
    path: str | os.PathLike[str],
    title: str,
    panels: Mapping[str, Grid],
    versions: Sequence[str],
    *,
    subtitles: Mapping[str, str] | None = None,
    style: HeatmapStyle = REPORT_STYLE,
) -> Path:
    """The compatibility matrix M[query][gallery] (rows: query version, columns: gallery
    version, both in ``versions`` order) as one PNG at ``path``: a panel per entry of
    ``panels`` (metric -> grid), titled by the metric and ``subtitles[metric]`` under it,
    ``title`` above them all. The one heat-map drawing of compat: the evaluate stage's plots
    (:func:`plot_images`) and the registry's run page
    (:func:`compat.registry.run_page.heatmaps`) differ only in ``style``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = list(versions)
    metrics = list(panels)
    subtitles = subtitles or {}
    n = len(names)
    cols = len(metrics) if style.per_row is None else min(style.per_row, len(metrics))
    rows = -(-len(metrics) // cols)
    # Cells keep ~0.5 in a side however long the chain, so a 7-version sequence stays readable;
    # tick labels of long version names need room beyond ~12 characters (0.08 in each).
    extra = 0.08 * max(0, max((len(name) for name in names), default=0) - 12)
    side = max(style.min_side, 0.8 + 0.5 * n) + extra
    lines = 1 + max((subtitles.get(m, "").count("\n") for m in metrics), default=0)
    # Room for the panel titles; the y-axis label takes a panel's width, which lowers the image
    # by as much as the x-axis label needs below it.
    head = 0.3 + 0.2 * lines
    width = max(5.5, side * cols + 0.6)  # 5.5 in: room for the title above one small panel
    fig = Figure(figsize=(width, (side + head) * rows + 0.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    cell_font = style.cell_font if n <= 8 else style.long_cell_font
    for ax, metric in zip(axes, metrics, strict=False):
        grid = np.full((n, n), np.nan)
        for qi, q in enumerate(names):
            for gi, g in enumerate(names):
                v = panels[metric].get(q, {}).get(g)
                grid[qi, gi] = np.nan if v is None else v
        ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis")
        for (qi, gi), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(gi, qi, f"{100 * v:.1f}", ha="center", va="center", fontsize=cell_font,
                        color="white" if v < 0.6 else "black")  # fmt: skip
        ax.set_xticks(range(n), names, rotation=30, ha="right", fontsize=10)
        ax.set_yticks(range(n), names, fontsize=10)
        if style.axis_labels:
            ax.set_xlabel("gallery version")
            ax.set_ylabel("query version")
        ax.set_title(metric + subtitles.get(metric, ""), fontsize=12)
    for ax in axes[len(metrics) :]:  # the empty places of a last, shorter row
        ax.set_axis_off()
    fig.suptitle(title, fontsize=12)
    out = Path(path)
    _save(fig, out, dpi=style.dpi)
    return out


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
        if not by_metric:
            continue
        sequence = report.get("sequence", {}).get(protocol, {})
        subtitles = {m: _sequence_line(sequence.get(m), len(report["chain"])) for m in by_metric}
        title = f"{protocol}: M[query][gallery] (%)"
        path = out_dir / f"heatmap_{protocol}.png"
        written.append(draw_heatmap(path, title, by_metric, versions, subtitles=subtitles))

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


def _save(fig: Any, path: Path, dpi: int = 110) -> None:
    """Write a PNG through a temporary file, so a kill never leaves half a picture; drawn in
    memory first, so a full disk names the bytes the picture needs."""
    png = io.BytesIO()
    fig.savefig(png, dpi=dpi, format="png")
    write_bytes(path, png.getvalue())


__all__ = [
    "REPORT_STYLE",
    "HeatmapStyle",
    "draw_heatmap",
    "plot_backfill",
    "plot_images",
]
