"""The forward result of an upgrade module psi and the partial-backfill curve (BiCT, Su et al.,
"Privacy-Preserving Model Upgrades with Bidirectional Compatible Training in Image Retrieval").

For a new version ``new`` whose psi upgrades galleries of ``old``, on the evaluation manifest:

* ``old``      M(old, old): what the service has before the upgrade;
* ``backward`` M(new, old): new queries on the old gallery as stored (BCT);
* ``forward``  M(new, psi(old)): new queries on the gallery upgraded by psi, no images needed;
* ``self``     M(new, new): a full backfill by re-embedding every gallery image;
* ``paragon``  M(new*, new*) when the chain names one;

with paired bootstrap intervals (same resamples as the chain report), forward - backward with its
one-sided lower bound, and the update gain (BCT Eq. 9) of both the backward and the forward
result. BiCT's claim is M(new, psi(old)) > M(new, old).

The **partial-backfill curve** is the metric over a gallery of which a share f has been
upgraded (f in ``backfill_fractions``, default 0, 0.25, 0.5, 0.75, 1): gallery rows are
upgraded in a seeded random order (``seed``), exactly floor(f x n) of the manifest's gallery
items and likewise of the other items (the second items of verification pairs). Queries are
always new-version embeddings: upgraded rows are in the new space, the rest in the old one,
which a backward-compatible new version can query (the rule of :mod:`compat.embeddings.mixed`).
``curve`` scores the two row groups on one scale as :func:`compat.embeddings.mixed.search_mixed`
does (``calibration="match"``: each query's scores against the old rows mapped onto its score
distribution against the upgraded rows, moments over the gallery items); ``curve_raw`` merges
raw inner products, which can dip below both end points. f = 0 is the backward cell, f = 1 the
forward cell. When psi changes the dimension there is no mixed gallery (rows of two widths):
the curve then has only its end points.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from compat.compare.bootstrap import bootstrap, lower_bound, percentile_interval
from compat.compare.matrix import update_gain
from compat.embeddings.mixed import calibrated_embeddings
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.protocols import (
    EvalSetLike,
    ProtocolResult,
    create_protocols,
    evaluate_manifest,
    label_codes,
)
from compat.io import write_json

TERMS = ("old", "backward", "forward", "self", "paragon")


def psi_name(old: str) -> str:
    """How the upgraded gallery of ``old`` is named in reports: ``psi(v1)``."""
    return f"psi({old})"


def backfill_order(manifest: EvalSetLike, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(gallery items, other items), each in the seeded random order they are upgraded in."""
    n = len(manifest.items)
    gallery = np.asarray(manifest.gallery, dtype=np.int64)
    others = np.setdiff1d(np.arange(n, dtype=np.int64), gallery)
    rng = np.random.default_rng([seed, 0xF0A4D])
    return rng.permutation(gallery), rng.permutation(others)


def upgrade_mask(n: int, order: tuple[np.ndarray, np.ndarray], fraction: float) -> np.ndarray:
    """(n,) True for the first floor(fraction x size) items of each ordered group."""
    mask = np.zeros(n, dtype=bool)
    for group in order:
        mask[group[: math.floor(fraction * len(group) + 1e-9)]] = True
    return mask


def mixed_gallery(old: np.ndarray, upgraded: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Rows of ``old`` with the ``mask`` rows replaced by their ``upgraded`` version."""
    out = old.copy()
    out[mask] = upgraded[mask]
    return out


def _num(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def evaluate_forward(
    manifest: EvalSetLike,
    embeddings: Mapping[str, np.ndarray],
    upgraded: Mapping[str, tuple[str, np.ndarray]],
    config: EvaluateConfig,
) -> dict[str, Any]:
    """The ``forward`` section of the report.

    ``embeddings[v]``: version v's (len(manifest.items), d) matrix; ``upgraded[new]`` is
    ``(old, psi(embeddings[old]))``, psi's upgrade of old's matrix into new's space.
    """
    protocols = create_protocols(config.protocols, **config.protocol_options())
    codes = label_codes(manifest.labels)
    out: dict[str, Any] = {}

    def cell(q: np.ndarray, g: np.ndarray) -> dict[str, ProtocolResult]:
        return evaluate_manifest(
            manifest, q, g, protocols, chunk_size=config.chunk_size, device=config.device,
            codes=codes,
        )  # fmt: skip

    for new, (old, up) in upgraded.items():
        e_new, e_old = embeddings[new], embeddings[old]
        if up.shape != e_new.shape:
            raise ValueError(
                f"{psi_name(old)}: shape {up.shape}, but {new}'s embeddings are {e_new.shape}"
            )
        same_dim = e_old.shape[1] == e_new.shape[1]
        paragon = config.paragon.get(new)
        cells: dict[str, dict[str, ProtocolResult]] = {
            "old": cell(e_old, e_old),
            "forward": cell(e_new, up),
            "self": cell(e_new, e_new),
        }
        if same_dim:
            cells["backward"] = cell(e_new, e_old)
        if paragon is not None and paragon in embeddings:
            cells["paragon"] = cell(embeddings[paragon], embeddings[paragon])

        order = backfill_order(manifest, config.seed)
        in_gallery = np.zeros(len(manifest.items), dtype=bool)
        in_gallery[np.asarray(manifest.gallery, dtype=np.int64)] = True
        curve_cells: dict[float, dict[str, ProtocolResult]] = {}
        raw_cells: dict[float, dict[str, ProtocolResult]] = {}
        for f in config.backfill_fractions:
            if f == 1.0:
                curve_cells[f] = raw_cells[f] = cells["forward"]
            elif f == 0.0 and same_dim:
                curve_cells[f] = raw_cells[f] = cells["backward"]
            elif same_dim:
                mask = upgrade_mask(len(manifest.items), order, f)
                mixed = mixed_gallery(e_old, up, mask)
                raw_cells[f] = cell(e_new, mixed)
                # Scores against the two row groups put on one scale, as search_mixed does.
                q2, g2 = calibrated_embeddings(e_new, mixed, mask, stats_rows=in_gallery)
                curve_cells[f] = cell(q2, g2)

        entry: dict[str, Any] = {
            "from": old,
            "gallery": psi_name(old),
            "paragon": paragon if "paragon" in cells else None,
            "fractions": list(config.backfill_fractions),
            "order": {"kind": "random", "seed": config.seed},
            "calibration": "match",
            "curve_note": None
            if same_dim
            else f"psi maps {e_old.shape[1]} to {e_new.shape[1]} dims: no mixed gallery",
            "metrics": {},
        }
        for p in protocols:
            per_term = {t: r[p.name] for t, r in cells.items()}
            boot = bootstrap(per_term, resamples=config.bootstrap, seed=config.seed, stream=p.name)
            for metric in p.metric_names():
                entry["metrics"].setdefault(p.name, {})[metric] = _metric_entry(
                    per_term, boot, metric, config, curve_cells, raw_cells, p.name
                )
        out[new] = entry
    return out


def _metric_entry(
    per_term: Mapping[str, ProtocolResult],
    boot: Any,
    metric: str,
    config: EvaluateConfig,
    curve_cells: Mapping[float, Mapping[str, ProtocolResult]],
    raw_cells: Mapping[float, Mapping[str, ProtocolResult]],
    protocol: str,
) -> dict[str, Any]:
    value = {t: r.metrics[metric] for t, r in per_term.items()}
    e: dict[str, Any] = {t: _num(value.get(t)) for t in TERMS}
    conf = config.confidence
    if config.bootstrap > 0:
        e["interval"] = {
            t: [_num(v) for v in percentile_interval(boot.samples[t][metric], conf)]
            for t in per_term
        }
        if "backward" in per_term:
            d = boot.difference("forward", "backward", metric)
            e["forward_minus_backward"] = {
                "value": _num(value["forward"] - value["backward"]),
                "interval": [_num(v) for v in percentile_interval(d, conf)],
                "lower_bound": _num(lower_bound(d, conf)),
            }
    elif "backward" in per_term:
        e["forward_minus_backward"] = {"value": _num(value["forward"] - value["backward"])}
    if "paragon" in value:
        for term in ("backward", "forward"):
            if term in value:
                gain = update_gain(value[term], value["old"], value["paragon"])
                e[f"gain_{term}"] = gain.to_json()
    for key, cells in (("curve", curve_cells), ("curve_raw", raw_cells)):
        e[key] = [
            {"fraction": f, "value": _num(r[protocol].metrics[metric])}
            for f, r in sorted(cells.items())
        ]
    return e


# ---------------------------------------------------------------------------- writing


def flat_forward(forward: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics/forward.json``: numbers only, ``<new>.<protocol>.<metric>.<term>``."""
    out: dict[str, Any] = {}
    for new, entry in forward.items():
        for protocol, by_metric in entry["metrics"].items():
            for metric, e in by_metric.items():
                row = {t: e[t] for t in TERMS if e.get(t) is not None}
                if "forward_minus_backward" in e:
                    row["forward_minus_backward"] = e["forward_minus_backward"]["value"]
                out.setdefault(new, {}).setdefault(protocol, {})[metric] = row
    return out


def curve_rows(entry: Mapping[str, Any], protocol: str) -> list[dict[str, Any]]:
    """One row per fraction with every metric of ``protocol`` (what ``dvc plots`` reads);
    ``<metric>`` is the calibrated curve, ``<metric>_raw`` the raw-score one."""
    rows: dict[float, dict[str, Any]] = {}
    for metric, e in entry["metrics"][protocol].items():
        for key, suffix in (("curve", ""), ("curve_raw", "_raw")):
            for point in e[key]:
                row = rows.setdefault(point["fraction"], {"fraction": point["fraction"]})
                row[metric + suffix] = point["value"]
    return [rows[f] for f in sorted(rows)]


def write_forward(
    forward: Mapping[str, Any],
    metrics_dir: str | os.PathLike[str] = "metrics",
    plots_dir: str | os.PathLike[str] = "plots",
    *,
    images: bool = True,
) -> list[Path]:
    """``metrics/forward.json``, ``plots/backfill/<new>_<protocol>.json`` and, with ``images``,
    ``plots/backfill_<new>.png``; returns the paths written."""
    mdir, pdir = Path(metrics_dir), Path(plots_dir)
    written = [mdir / "forward.json"]
    write_json(written[0], flat_forward(forward))
    for new, entry in forward.items():
        for protocol in entry["metrics"]:
            path = pdir / "backfill" / f"{new}_{protocol}.json"
            write_json(path, curve_rows(entry, protocol))
            written.append(path)
    if images:
        written += plot_backfill(forward, pdir)
    return written


def plot_backfill(forward: Mapping[str, Any], plots_dir: str | os.PathLike[str]) -> list[Path]:
    """One PNG per new version: a panel per protocol, metric vs share of the gallery upgraded,
    with M(new, new) (re-embedding every image) dashed for reference."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out_dir = Path(plots_dir)
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
        fig.savefig(path, dpi=110)
        written.append(path)
    return written


__all__ = [
    "TERMS",
    "backfill_order",
    "curve_rows",
    "evaluate_forward",
    "flat_forward",
    "mixed_gallery",
    "plot_backfill",
    "psi_name",
    "upgrade_mask",
    "write_forward",
]
